package main

import (
	"os"
	"strings"
	"testing"
)

// The README shows this program as written: keep the two equal.
func TestREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	program, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	const open = "```go\n// Command quickstart"
	start := strings.Index(string(readme), open)
	if start < 0 {
		t.Fatal("README.md has no ```go block with the quickstart program")
	}
	block := string(readme)[start+len("```go\n"):]
	block = block[:strings.Index(block, "```\n")]
	if block != string(program) {
		t.Error("the README's quickstart block differs from examples/quickstart/main.go")
	}
}
