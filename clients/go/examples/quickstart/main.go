// Command quickstart submits a managed execution, answers its input round
// and prints the outcome: go run ./examples/quickstart 127.0.0.1:50051
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/m3grpc/m3grpc/clients/go/m3"
)

func main() {
	ctx := context.Background()
	client, err := m3.Dial(os.Args[1])
	must(err)
	defer client.Close()

	exe, err := client.Submit(ctx, m3.AgentSpec{Harness: "scripted", Prompt: "Book it.", Server: "shipping",
		Tools: []string{"shipping:book_shipment"}}, m3.WithHumanInput(m3.HumanInputManaged))
	must(err)
	for ev, err := range client.WatchPending(ctx, m3.WatchOptions{ExecutionID: exe.GetExecutionId()}) {
		must(err) // the stream ends after the execution finishes
		if ev.Kind == m3.EventRoundPending {
			_, err = client.Respond(ctx, ev.Round.GetRoundId(), map[string]m3.Response{
				"shipping_address": m3.Accept(map[string]any{"street": "1 Main Street", "city": "Pune"}),
			}, "address-"+ev.Round.GetRoundId())
			must(err)
		}
	}
	result, err := client.Result(ctx, exe.GetExecutionId(), time.Minute)
	must(err)
	fmt.Println(result.GetOutcome(), result.GetOperations()[0].GetResult().AsMap()["content"])
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
