"""Developer tools shipped with the package (used by tests and `m3grpc demo`).

`fake_model` is a stand-in for a hosted LLM: a loopback server that speaks the
OpenAI Responses API streaming format, so the `codex` harness runs end to end
without a network or an account.
"""
