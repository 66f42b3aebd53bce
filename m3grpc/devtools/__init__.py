"""Developer tools shipped with the package (used by tests and `m3grpc demo`).

`fake_model` and `fake_anthropic` are stand-ins for a hosted LLM: loopback servers
that speak the OpenAI Responses API and the Anthropic Messages API streaming
formats, so the `codex` harness and Claude Code run end to end without a network
or an account. `fake_server` holds what they share.
"""
