package ledger

import (
	"fmt"
	"strings"
	"testing"
)

// oneRule is a policy with a single rule named r whose body is given (indented by the caller
// as rule fields), plus optional top-level YAML.
func oneRule(body string, top ...string) string {
	return strings.Join(top, "\n") + "\nrules:\n  - name: r\n" + indent(body)
}

func indent(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		b.WriteString("    " + strings.TrimSpace(line) + "\n")
	}
	return b.String()
}

const okBudget = "budgets: [{window: 60s, capacity: 600}]"

func rulesN(n int, catchAllAt int) string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := 0; i < n; i++ {
		match := fmt.Sprintf("match: {subjects: [s%d]}, ", i)
		if i == catchAllAt {
			match = ""
		}
		fmt.Fprintf(&b, "  - {name: r%d, %s%s, reserved_tokens: 1}\n", i, match, okBudget)
	}
	return b.String()
}

func TestCompileRejectsWithPathAndFix(t *testing.T) {
	longName := strings.Repeat("m", 257)
	var manyModels []string
	for i := 0; i < 65; i++ {
		manyModels = append(manyModels, fmt.Sprintf("m%d", i))
	}
	cases := []struct {
		name string
		src  string
		want string // "path: message fragment"
	}{
		// Structure and numbers.
		{"an unknown rule field, with a suggestion", oneRule(okBudget + "\nreserved_tokens: 1\nreservation_timout: 1s"),
			`rules[0].reservation_timout: unknown field; did you mean "reservation_timeout"?`},
		{"a zero capacity", oneRule("budgets: [{window: 60s, capacity: 0}]\nreserved_tokens: 1"),
			"rules[0].budgets[0].capacity: must be a positive whole number of tokens"},
		{"a negative capacity", oneRule("budgets: [{window: 60s, capacity: -5}]\nreserved_tokens: 1"),
			"rules[0].budgets[0].capacity: must be a positive whole number of tokens"},
		{"a missing capacity", oneRule("budgets: [{window: 60s}]\nreserved_tokens: 1"),
			"rules[0].budgets[0].capacity: must be a positive whole number of tokens"},
		{"a capacity above 2^53", oneRule("budgets: [{window: 60s, capacity: 9007199254740993}]\nreserved_tokens: 1"),
			"rules[0].budgets[0].capacity: 9007199254740993 exceeds the maximum 9007199254740992 (2^53)"},
		{"a capacity overflowing int64", oneRule("budgets: [{window: 60s, capacity: 9223372036854775808}]\nreserved_tokens: 1"),
			"rules[0].budgets[0].capacity: 9223372036854775808 is too large"},
		{"a zero reserved_tokens", oneRule(okBudget + "\nreserved_tokens: 0"),
			"rules[0].reserved_tokens: must be a positive whole number of tokens"},
		{"a negative fallback_estimate", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: -1}"),
			"rules[0].estimation.fallback_estimate: must be a positive whole number of tokens"},

		// Budgets.
		{"no budgets", oneRule("budgets: []\nreserved_tokens: 1"),
			"rules[0].budgets: at least one budget is required"},
		{"no budgets key", oneRule("reserved_tokens: 1"),
			"rules[0].budgets: at least one budget is required"},
		{"nine budgets", oneRule("budgets: [{window: 1s, capacity: 9}, {window: 2s, capacity: 9}, {window: 3s, capacity: 9}, {window: 4s, capacity: 9}, {window: 5s, capacity: 9}, {window: 6s, capacity: 9}, {window: 7s, capacity: 9}, {window: 8s, capacity: 9}, {window: 9s, capacity: 9}]\nreserved_tokens: 1"),
			"rules[0].budgets: 9 budgets; at most 8 windows per rule"},
		{"the same window written twice", oneRule("budgets: [{window: 60s, capacity: 9}, {window: 1m, capacity: 90}]\nreserved_tokens: 1"),
			"rules[0].budgets[1].window: 1m duplicates budgets[0]; each window may appear once per rule"},
		{"a window under a second", oneRule("budgets: [{window: 999ms, capacity: 9}]\nreserved_tokens: 1"),
			"rules[0].budgets[0].window: 999ms is shorter than the minimum 1s"},
		{"a window over 7 days", oneRule("budgets: [{window: 169h, capacity: 9}]\nreserved_tokens: 1"),
			"rules[0].budgets[0].window: 169h is longer than the maximum 168h (7 days)"},
		{"a window in days", oneRule("budgets: [{window: 7d, capacity: 9}]\nreserved_tokens: 1"),
			`rules[0].budgets[0].window: "7d": days are not accepted; write hours (7d is 168h)`},
		{"a missing window", oneRule("budgets: [{capacity: 9}]\nreserved_tokens: 1"),
			"rules[0].budgets[0].window: required; write a duration such as 60s"},
		{"a zero window", oneRule("budgets: [{window: 0s, capacity: 9}]\nreserved_tokens: 1"),
			`rules[0].budgets[0].window: "0s" is zero`},

		// Lease.
		{"a lease under a second", oneRule(okBudget + "\nreserved_tokens: 1\nreservation_timeout: 500ms"),
			"rules[0].reservation_timeout: 500ms is out of bounds; write 1s to 24h"},
		{"a lease over a day", oneRule(okBudget + "\nreserved_tokens: 1\nreservation_timeout: 25h"),
			"rules[0].reservation_timeout: 25h is out of bounds; write 1s to 24h"},

		// Estimate presence and size.
		{"both reserved_tokens and estimation", oneRule(okBudget + "\nreserved_tokens: 1\nestimation: {strategy: fixed, fallback_estimate: 1}"),
			"rules[0]: reserved_tokens and estimation are both set; keep one"},
		{"neither reserved_tokens nor estimation", oneRule(okBudget),
			"rules[0]: no estimate; add reserved_tokens: N or an estimation block"},
		{"reserved_tokens above the smallest capacity", oneRule("budgets: [{window: 1h, capacity: 600}, {window: 60s, capacity: 60}]\nreserved_tokens: 80"),
			"rules[0].reserved_tokens: estimate 80 exceeds capacity 60 of budgets[1]; lower it or raise the capacity"},
		{"a fixed estimate above capacity through its multiplier", oneRule("budgets: [{window: 60s, capacity: 60}]\nestimation: {strategy: fixed, fallback_estimate: 40, multiplier: 2}"),
			"rules[0].estimation: estimate 80 (ceil(fallback_estimate × multiplier)) exceeds capacity 60 of budgets[0]; lower it or raise the capacity"},
		{"a fallback_estimate above capacity", oneRule("budgets: [{window: 60s, capacity: 60}]\nestimation: {strategy: max_tokens, fallback_estimate: 500}"),
			"rules[0].estimation.fallback_estimate: fallback_estimate 500 exceeds capacity 60 of budgets[0]; lower it or raise the capacity"},
		{"a fallback estimate above capacity through its multiplier", oneRule("budgets: [{window: 60s, capacity: 60}]\nestimation: {strategy: input_plus_max_tokens, fallback_estimate: 50, multiplier: 1.5}"),
			"rules[0].estimation: estimate 75 (ceil(fallback_estimate × multiplier)) exceeds capacity 60"},
		{"a model_scaled fallback above capacity through default_multiplier", oneRule("budgets: [{window: 60s, capacity: 60}]\nestimation: {strategy: model_scaled, fallback_estimate: 50, default_multiplier: 2}"),
			"rules[0].estimation: estimate 100 (ceil(fallback_estimate × default_multiplier × multiplier)) exceeds capacity 60"},
		{"a missing fallback_estimate, for every strategy", oneRule(okBudget + "\nestimation: {strategy: max_tokens}"),
			"rules[0].estimation.fallback_estimate: required: the estimate of a request that states no max_tokens"},
		{"a fallback_estimate above 2^53", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: 9007199254740993}"),
			"rules[0].estimation.fallback_estimate: 9007199254740993 exceeds the maximum 9007199254740992 (2^53)"},

		// Strategy.
		{"an unknown strategy lists the four", oneRule(okBudget + "\nestimation: {strategy: tokens, fallback_estimate: 1}"),
			`rules[0].estimation.strategy: "tokens" is not a strategy; write fixed, max_tokens, input_plus_max_tokens or model_scaled`},
		{"a missing strategy", oneRule(okBudget + "\nestimation: {fallback_estimate: 1}"),
			"rules[0].estimation.strategy: required; write fixed, max_tokens, input_plus_max_tokens or model_scaled"},
		{"fixed refuses bytes_per_token", oneRule(okBudget + "\nestimation: {strategy: fixed, fallback_estimate: 1, bytes_per_token: 4}"),
			"rules[0].estimation.bytes_per_token: not accepted by strategy fixed; remove it"},
		{"fixed refuses model_multipliers", oneRule(okBudget + "\nestimation: {strategy: fixed, fallback_estimate: 1, model_multipliers: {a: 1}}"),
			"rules[0].estimation.model_multipliers: not accepted by strategy fixed; remove it"},
		{"fixed refuses an empty model_multipliers too", oneRule(okBudget + "\nestimation: {strategy: fixed, fallback_estimate: 1, model_multipliers: {}}"),
			"rules[0].estimation.model_multipliers: not accepted by strategy fixed; remove it"},
		{"fixed refuses default_multiplier", oneRule(okBudget + "\nestimation: {strategy: fixed, fallback_estimate: 1, default_multiplier: 1}"),
			"rules[0].estimation.default_multiplier: not accepted by strategy fixed; remove it"},
		{"max_tokens refuses model_multipliers", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: 1, model_multipliers: {a: 1}}"),
			"rules[0].estimation.model_multipliers: not accepted by strategy max_tokens; remove it"},
		{"max_tokens refuses default_multiplier", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: 1, default_multiplier: 1}"),
			"rules[0].estimation.default_multiplier: not accepted by strategy max_tokens; remove it"},
		{"max_tokens refuses bytes_per_token", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: 1, bytes_per_token: 4}"),
			"rules[0].estimation.bytes_per_token: not accepted by strategy max_tokens; remove it"},
		{"input_plus_max_tokens refuses model_multipliers", oneRule(okBudget + "\nestimation: {strategy: input_plus_max_tokens, fallback_estimate: 1, model_multipliers: {a: 1}}"),
			"rules[0].estimation.model_multipliers: not accepted by strategy input_plus_max_tokens; remove it"},
		{"input_plus_max_tokens refuses default_multiplier", oneRule(okBudget + "\nestimation: {strategy: input_plus_max_tokens, fallback_estimate: 1, default_multiplier: 1}"),
			"rules[0].estimation.default_multiplier: not accepted by strategy input_plus_max_tokens; remove it"},
		{"model_scaled refuses bytes_per_token", oneRule(okBudget + "\nestimation: {strategy: model_scaled, fallback_estimate: 1, bytes_per_token: 4}"),
			"rules[0].estimation.bytes_per_token: not accepted by strategy model_scaled; remove it"},

		// Multipliers.
		{"a zero multiplier", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: 1, multiplier: 0}"),
			"rules[0].estimation.multiplier: must be a finite number greater than 0"},
		{"a negative multiplier", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: 1, multiplier: -1.5}"),
			"rules[0].estimation.multiplier: must be a finite number greater than 0"},
		{"an infinite multiplier", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: 1, multiplier: .inf}"),
			"rules[0].estimation.multiplier: must be a finite number greater than 0"},
		{"a NaN multiplier", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: 1, multiplier: .nan}"),
			"rules[0].estimation.multiplier: must be a finite number greater than 0"},
		{"a text multiplier", oneRule(okBudget + "\nestimation: {strategy: max_tokens, fallback_estimate: 1, multiplier: double}"),
			`rules[0].estimation.multiplier: "double" is not a number`},
		{"a zero default_multiplier", oneRule(okBudget + "\nestimation: {strategy: model_scaled, fallback_estimate: 1, default_multiplier: 0}"),
			"rules[0].estimation.default_multiplier: must be a finite number greater than 0"},
		{"a negative model multiplier, by model", oneRule(okBudget + "\nestimation: {strategy: model_scaled, fallback_estimate: 1, model_multipliers: {gpt-x: 1, \"gpt-4.1\": -2}}"),
			`rules[0].estimation.model_multipliers["gpt-4.1"]: must be a finite number greater than 0`},
		{"an empty model in model_multipliers", oneRule(okBudget + "\nestimation: {strategy: model_scaled, fallback_estimate: 1, model_multipliers: {\"\": 2}}"),
			`rules[0].estimation.model_multipliers[""]: empty model name; remove it`},
		{"an empty model_multipliers", oneRule(okBudget + "\nestimation: {strategy: model_scaled, fallback_estimate: 1, model_multipliers: {}}"),
			"rules[0].estimation.model_multipliers: empty; list model: multiplier pairs"},
		{"a zero bytes_per_token", oneRule(okBudget + "\nestimation: {strategy: input_plus_max_tokens, fallback_estimate: 1, bytes_per_token: 0}"),
			"rules[0].estimation.bytes_per_token: must be a finite number greater than 0"},

		// Names.
		{"a rule without a name", "rules: [{" + okBudget + ", reserved_tokens: 1}]",
			"rules[0].name: required"},
		{"a rule name with capitals", "rules: [{name: Gold, " + okBudget + ", reserved_tokens: 1}]",
			`rules[0].name: "Gold" is not a valid name; use 1 to 63 characters of a-z 0-9 . _ - starting with a letter or digit`},
		{"a rule name starting with a dash", "rules: [{name: -x, " + okBudget + ", reserved_tokens: 1}]",
			`rules[0].name: "-x" is not a valid name`},
		{"a rule name of 64 characters", "rules: [{name: " + strings.Repeat("a", 64) + ", " + okBudget + ", reserved_tokens: 1}]",
			"rules[0].name: \"" + strings.Repeat("a", 64) + "\" is not a valid name"},
		{"a duplicate rule name", "rules:\n  - {name: a, match: {subjects: [x]}, " + okBudget + ", reserved_tokens: 1}\n  - {name: a, " + okBudget + ", reserved_tokens: 1}",
			`rules[1].name: "a" is already the name of rules[0]; names must be unique`},

		// Match.
		{"an empty match", oneRule("match: {}\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].match: empty; list subjects and/or models, or remove match to match every request"},
		{"a match without a value", oneRule("match:\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].match: has no value; give it one or remove the key"},
		{"an empty subjects list", oneRule("match: {subjects: []}\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].match.subjects: empty list; list at least one subject, or remove the key to match any subject"},
		{"an empty models list", oneRule("match: {models: []}\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].match.models: empty list; list at least one model, or remove the key to match any model"},
		{"a duplicate subject", oneRule("match: {subjects: [a, b, a]}\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].match.subjects[2]: duplicates rules[0].match.subjects[0]; remove one"},
		{"an empty subject", oneRule("match: {subjects: [a, \"\"]}\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].match.subjects[1]: empty; remove it"},
		{"a matched model that is not allowed", oneRule("match: {models: [x, y]}\nallowed_models: [x]\n" + okBudget + "\nreserved_tokens: 1"),
			`rules[0].match.models[1]: "y" is matched but not in allowed_models`},

		// Key and allowed models.
		{"an unknown key mode", oneRule("key: model\n" + okBudget + "\nreserved_tokens: 1"),
			`rules[0].key: "model" is not a key mode; write subject or subject_and_model`},
		{"an empty allowed_models", oneRule("allowed_models: []\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].allowed_models: empty list; list at least one model, or remove the key to allow any model"},
		{"an empty allowed model", oneRule("allowed_models: [x, \"\"]\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].allowed_models[1]: empty; remove it"},
		{"a duplicate allowed model", oneRule("allowed_models: [x, y, x]\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].allowed_models[2]: duplicates rules[0].allowed_models[0]; remove one"},
		{"an allowed model over 256 bytes", oneRule("allowed_models: [" + longName + "]\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].allowed_models[0]: 257 bytes; at most 256 are allowed"},
		{"65 allowed models", oneRule("allowed_models: [" + strings.Join(manyModels, ", ") + "]\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].allowed_models: 65 entries; at most 64 are allowed"},

		// Rules.
		{"no rules", "rules: []", "rules: at least one rule is required"},
		{"no rules key", "backend: {kind: memory}", "rules: at least one rule is required"},
		{"33 rules", rulesN(33, 32), "rules: 33 rules; at most 32 are allowed"},
		{"a rule after a catch-all", rulesN(3, 1),
			`rules[2]: unreachable: rules[1] ("r1") has no match and takes every request first; move "r2" before it or remove it`},

		// Limits.
		{"a negative limit", oneRule(okBudget+"\nreserved_tokens: 1", "limits: {max_active_reservations: -1}"),
			"limits.max_active_reservations: -1 is negative; write a positive whole number, or remove it for the default 200000"},
		{"an explicit zero limit", oneRule(okBudget+"\nreserved_tokens: 1", "limits: {max_keys: 0}"),
			"limits.max_keys: must be positive; remove it to use the default"},
		{"subject_and_model without allowed_models", oneRule("key: subject_and_model\n" + okBudget + "\nreserved_tokens: 1"),
			"rules[0].allowed_models: is required with key subject_and_model"},
		{"a key length over 1024", oneRule(okBudget+"\nreserved_tokens: 1", "limits: {max_key_length: 1025}"),
			"limits.max_key_length: 1025 exceeds the maximum 1024"},
		{"a key length too short for subject keys", oneRule(okBudget+"\nreserved_tokens: 1", "limits: {max_key_length: 53}"),
			"limits.max_key_length: 53 is shorter than the 54-byte keys rules[0] produces; raise it to at least 54"},
		{"a key length too short for subject_and_model keys", oneRule("key: subject_and_model\nallowed_models: [m]\n"+okBudget+"\nreserved_tokens: 1", "limits: {max_key_length: 100}"),
			"limits.max_key_length: 100 is shorter than the 104-byte keys rules[0] produces; raise it to at least 104"},
		{"a body limit over 64 MiB", oneRule(okBudget+"\nreserved_tokens: 1", "limits: {max_body_bytes: 67108865}"),
			"limits.max_body_bytes: 67108865 exceeds the maximum 67108864"},
		{"an unknown limit", oneRule(okBudget+"\nreserved_tokens: 1", "limits: {max_key: 5}"),
			`limits.max_key: unknown field; did you mean "max_keys"?`},

		// Backend.
		{"an unknown backend", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {kind: redis}"),
			`backend.kind: "redis" is not a backend; write memory or valkey`},
		{"valkey without a url", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {kind: valkey}"),
			"backend.url: required for kind valkey; write redis://host:6379 or a whole ${ENV_VAR} reference"},
		{"a url for the memory backend", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {url: 'redis://h:1'}"),
			"backend.url: not used by kind memory; remove it or set kind: valkey"},
		{"a url of another scheme", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {kind: valkey, url: 'valkey://h:1'}"),
			"backend.url: scheme must be redis:// or rediss://"},
		{"a namespace with a space", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {namespace: 'a b'}"),
			"backend.namespace: must be 1 to 128 characters of A-Z a-z 0-9 : . _ -"},
		{"a namespace of 129 characters", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {namespace: "+strings.Repeat("n", 129)+"}"),
			"backend.namespace: must be 1 to 128 characters"},
		{"a store timeout under 10ms", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {timeout: 5ms}"),
			"backend.timeout: 5ms is out of bounds; write 10ms to 10s"},
		{"a store timeout over 10s", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {timeout: 11s}"),
			"backend.timeout: 11s is out of bounds; write 10ms to 10s"},
	}
	for _, tc := range cases {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			_, err := LoadPolicy([]byte(tc.src), testEnv)
			if err == nil {
				t.Fatalf("loaded; want %q\n%s", tc.want, tc.src)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want %q among the errors, got:\n%v\n--- policy:\n%s", tc.want, err, tc.src)
			}
		})
	}
}

func TestCompileAcceptsBoundaryValues(t *testing.T) {
	var maxModels []string
	for i := 0; i < 64; i++ {
		maxModels = append(maxModels, fmt.Sprintf("%s%02d", strings.Repeat("m", 254), i))
	}
	cases := []struct{ name, src string }{
		{"a 1s window and a 168h window", oneRule("budgets: [{window: 1s, capacity: 1}, {window: 168h, capacity: 9007199254740992}]\nreserved_tokens: 1")},
		{"8 budgets", oneRule("budgets: [{window: 1s, capacity: 9}, {window: 2s, capacity: 9}, {window: 3s, capacity: 9}, {window: 4s, capacity: 9}, {window: 5s, capacity: 9}, {window: 6s, capacity: 9}, {window: 7s, capacity: 9}, {window: 8s, capacity: 9}]\nreserved_tokens: 9")},
		{"a lease of 1s and of 24h", "rules:\n  - {name: a, match: {subjects: [x]}, " + okBudget + ", reserved_tokens: 1, reservation_timeout: 1s}\n  - {name: b, " + okBudget + ", reserved_tokens: 1, reservation_timeout: 24h}"},
		{"an estimate equal to the capacity", oneRule("budgets: [{window: 60s, capacity: 60}]\nestimation: {strategy: fixed, fallback_estimate: 30, multiplier: 2}")},
		{"32 rules", rulesN(32, 31)},
		{"timeouts of 10ms and 10s", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {timeout: 10ms}")},
		{"a 128-character namespace", oneRule(okBudget+"\nreserved_tokens: 1", "backend: {namespace: '"+strings.Repeat("n", 128)+"'}")},
		{"a key length exactly long enough", oneRule("key: subject_and_model\nallowed_models: [m]\n"+okBudget+"\nreserved_tokens: 1", "limits: {max_key_length: 104}")},
		{"64 allowed models of 256 bytes", oneRule("allowed_models: [" + strings.Join(maxModels, ", ") + "]\n" + okBudget + "\nreserved_tokens: 1")},
		{"a subject that reads as a number", oneRule("match: {subjects: [1234, true]}\n" + okBudget + "\nreserved_tokens: 1")},
	}
	for _, tc := range cases {
		t.Run("accepts "+tc.name, func(t *testing.T) {
			if _, err := LoadPolicy([]byte(tc.src), testEnv); err != nil {
				t.Fatalf("got:\n%v\n--- policy:\n%s", err, tc.src)
			}
		})
	}
}

func TestCompileReportsEveryProblemAtOnce(t *testing.T) {
	src := `
backend: {kind: valkey}
rules:
  - name: A
    budgets: [{window: 60s, capacity: 0}]
    estimation: {strategy: fixed, fallback_estimate: 1, bytes_per_token: 4, default_multiplier: 2}
  - name: b
    budgets: []
`
	_, err := LoadPolicy([]byte(src), testEnv)
	if err == nil {
		t.Fatal("loaded")
	}
	want := []string{
		"backend.url: required for kind valkey",
		"rules[0].name:",
		"rules[0].budgets[0].capacity:",
		"rules[0].estimation.default_multiplier: not accepted by strategy fixed",
		"rules[0].estimation.bytes_per_token: not accepted by strategy fixed",
		"rules[1].budgets: at least one budget is required",
		"rules[1]: no estimate",
		"rules[1]: unreachable",
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("want %d errors, got %d:\n%v", len(want), len(lines), err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("missing %q in:\n%v", w, err)
		}
	}
}
