// Package altgateway is a second, independent LLM gateway written for the tests, to prove that
// the qualification's gateway seam (package undertest) qualifies gateways other than
// quotaqual's own. It shares no code with gateway/ or ledger/ and is built in a deliberately
// different style:
//
//   - a JSON config file of its own (config.go), not quotaqual's YAML;
//   - a fixed-window counter: one Valkey key per caller and window, INCRBY the per-call charge
//     on admission, and INCRBY the difference to the reported usage afterwards; no
//     reservations, no leases, no sliding window (counter.go);
//   - a hand-written RESP client that dials Valkey for every operation (resp.go);
//   - its own error bodies ({"problem": "..."}), its own quota headers (X-Allowance-*), no
//     attribution header, no request id, no quota inspection; health on a second listener
//     at /live and /ready (server.go).
//
// `quotaqual altgateway --config FILE` runs it (a hidden command: the test binary is the
// quotaqual binary, so every engine can launch it without a build of its own). It is not a
// product: it exists so the qualification's verdicts on a gateway it was not written for can
// be pinned (undertest/profiles/altgateway.yaml).
package altgateway
