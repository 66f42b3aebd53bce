// Command m3-scenarios is the Go driver of the cross-language scenario suite
// (tests/scenarios/README.md): it runs every scenario of scenarios.json
// against a live `m3grpc serve` through the m3 client package.
//
//	go run ./cmd/m3-scenarios --target 127.0.0.1:PORT --scenarios ../../tests/scenarios/scenarios.json [--ca CA.pem] [NAME ...]
//
// With --ca it connects with TLS; $M3_SCENARIO_TOKEN, when set, is sent as a bearer token.
//
// It prints one line per step and the summary `go: N passed, M failed`, and
// exits 0 only when every selected scenario passed.
package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/m3grpc/m3grpc/clients/go/m3"
)

const (
	language = "go"
	format   = "m3-scenarios/v1"
	// callTimeout bounds every unary call (Result waits add their own timeout).
	callTimeout = 30 * time.Second
	// cleanupTimeout bounds the cancellation of a failed scenario's executions.
	cleanupTimeout = 10 * time.Second
)

type suite struct {
	Format    string            `json:"format"`
	Servers   map[string]string `json:"servers"`
	Scenarios []scenario        `json:"scenarios"`
}

type scenario struct {
	Name        string            `json:"name"`
	Description string            `json:"description"`
	Steps       []json.RawMessage `json:"steps"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("m3-scenarios", flag.ContinueOnError)
	flags.SetOutput(stderr)
	target := flags.String("target", "", "the service address, HOST:PORT (required)")
	path := flags.String("scenarios", "", "the path of scenarios.json (required)")
	caPath := flags.String("ca", "", "connect with TLS, verifying the server with this CA (PEM); the token comes from $M3_SCENARIO_TOKEN")
	flags.Usage = func() {
		fmt.Fprintln(stderr, "usage: m3-scenarios --target HOST:PORT --scenarios PATH [NAME ...]")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *target == "" || *path == "" {
		flags.Usage()
		return 2
	}
	s, err := load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "m3-scenarios: %v\n", err)
		return 2
	}
	selected, err := selectScenarios(s.Scenarios, flags.Args())
	if err != nil {
		fmt.Fprintf(stderr, "m3-scenarios: %v\n", err)
		return 2
	}
	options, err := dialOptions(*caPath, os.Getenv("M3_SCENARIO_TOKEN"))
	if err != nil {
		fmt.Fprintf(stderr, "m3-scenarios: %v\n", err)
		return 2
	}
	client, err := m3.Dial(*target, options...)
	if err != nil {
		fmt.Fprintf(stderr, "m3-scenarios: %v\n", err)
		return 2
	}
	defer client.Close()

	token := runToken()
	passed, failed := 0, 0
	for _, sc := range selected {
		if runScenario(client, sc, token, stdout) {
			passed++
		} else {
			failed++
		}
	}
	fmt.Fprintf(stdout, "%s: %d passed, %d failed\n", language, passed, failed)
	if failed == 0 && passed > 0 {
		return 0
	}
	return 1
}

func load(path string) (*suite, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s suite
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Format != format {
		return nil, fmt.Errorf("%s: format %q, want %q", path, s.Format, format)
	}
	return &s, nil
}

func selectScenarios(all []scenario, names []string) ([]scenario, error) {
	if len(names) == 0 {
		return all, nil
	}
	var out []scenario
	for _, name := range names {
		i := slices.IndexFunc(all, func(s scenario) bool { return s.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("no scenario named %q", name)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// runToken is unique to this driver run; it replaces `{run}` in the steps.
func runToken() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runScenario runs the steps in order, printing a line for each, and stops
// at the first failing one. A failed scenario's executions are cancelled so
// they do not hold the service's workers.
func runScenario(client *m3.Client, sc scenario, token string, out io.Writer) bool {
	r := newRunner(client)
	for index, raw := range sc.Steps {
		st, err := decodeStep(raw, token)
		op := st.Op
		if op == "" {
			op = "?"
		}
		if err == nil {
			err = r.run(st)
		}
		if err != nil {
			fmt.Fprintf(out, "FAIL %s %s step %d (%s): %s\n", language, sc.Name, index, op, oneLine(err.Error()))
			r.cleanup()
			return false
		}
		fmt.Fprintf(out, "ok   %s %s step %d (%s)\n", language, sc.Name, index, op)
	}
	return true
}

// decodeStep replaces `{run}` in every string value, then decodes the step,
// refusing fields this driver does not know.
func decodeStep(raw json.RawMessage, token string) (step, error) {
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return step{}, fmt.Errorf("bad step: %w", err)
	}
	data, err := json.Marshal(substitute(generic, token))
	if err != nil {
		return step{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var st step
	if err := dec.Decode(&st); err != nil {
		return st, fmt.Errorf("bad step: %w", err)
	}
	return st, nil
}

func substitute(v any, token string) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(v, "{run}", token)
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = substitute(item, token)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[k] = substitute(item, token)
		}
		return out
	}
	return v
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// dialOptions: TLS with the CA at caPath (none: plaintext) and a bearer token (none: "").
func dialOptions(caPath, token string) ([]grpc.DialOption, error) {
	var options []grpc.DialOption
	if caPath != "" {
		ca, err := os.ReadFile(caPath)
		if err != nil {
			return nil, err
		}
		option, err := m3.WithTLS(m3.TLSConfig{RootCA: ca})
		if err != nil {
			return nil, err
		}
		options = append(options, option)
	}
	if token != "" {
		options = append(options, m3.WithToken(token))
	}
	return options, nil
}
