//go:build quotaqual_mutants

package ledger

// The ledger's mutants that live in the store's scripts (internal/mutant has the catalogue):
// each rewrites the assembled Lua source, so the script files stay as they ship. A rewrite
// whose text is no longer in the scripts stops the gateway at start (checkRewrite) rather
// than qualifying the unbroken ledger under the mutant's name.

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/quotaqual/quotaqual/internal/mutant"
)

// rewrite is one textual change to the assembled scripts: to every script, or only to the one
// named by script ("reserve", "renew", "settle", "inspect").
type rewrite struct{ script, old, new string }

var rewrites = map[mutant.Name][]rewrite{
	// The store's TIME replaced by the clock the gateway passes as the last argument.
	mutant.GatewayClock: {{
		old: "local t = redis.call('TIME')\nlocal now = t[1] * 1000 + floor(t[2] / 1000)\n",
		new: "local now = tonumber(ARGV[#ARGV])\n",
	}},
	// The expiry sweep charges into a key next to the bucket hash, which admission never reads
	// (the upstream D1 bug: a sweep writing another scope than admission reads).
	mutant.SweepUnreadKey: {{
		old: "        charge(wd, floor(dl / wd.w), est)\n",
		new: "        redis.call('HINCRBY', wd.key .. ':swept', idx(floor(dl / wd.w)), est)\n",
	}},
	// Admission weighs the estimate against the rule's first budget only, on the fast path and
	// on the general one; the other windows are still reported (their remaining may go below
	// zero), as a limiter built for one window and extended by listing more would.
	mutant.FirstBudgetOnly: {
		{script: "reserve", old: "    if remaining < 0 then\n      out = nil -- does not fit\n",
			new: "    if remaining < 0 and i == 1 then\n      out = nil -- does not fit\n"},
		{script: "reserve", old: "  if s + res + est > tonumber(ARGV[o]) and not repeated then\n",
			new: "  if i == 1 and s + res + est > tonumber(ARGV[o]) and not repeated then\n"},
	},
	// A denial reports the first window that refuses, not the one whose wait is longest.
	mutant.RetryAfterFirstWindow: {{script: "reserve", old: "    if wait > worst then\n",
		new: "    if worst < 0 then\n"}},
}

// scripts are the ledger's scripts by the names rewrites use.
func scripts() map[string]*valkey.Lua {
	return map[string]*valkey.Lua{"reserve": reserveScript, "renew": renewScript, "settle": settleScript, "inspect": inspectScript}
}

var (
	mutatedMu sync.Mutex
	mutated   = map[*valkey.Lua]*valkey.Lua{}
)

func init() { mutant.RegisterCheck(checkRewrite) }

// checkRewrite fails when the armed mutant's rewrite no longer matches the scripts it applies
// to (the scripts changed): the gateway then refuses to start instead of running unbroken.
func checkRewrite(n mutant.Name) error {
	for _, rw := range rewrites[n] {
		for name, s := range scripts() {
			if rw.script != "" && rw.script != name {
				continue
			}
			if !strings.Contains(scriptSource(s), rw.old) {
				return fmt.Errorf("mutant %s: the %s script no longer contains %q; update ledger/mutants_on.go", n, name, rw.old)
			}
		}
	}
	return nil
}

// gatewayClockSkew is how far gateway-b's clock runs ahead under the gateway-clock mutant.
const gatewayClockSkew = 3 * time.Second

// mutateScript returns the script (and arguments) a call runs under the armed mutant.
func mutateScript(s *valkey.Lua, args []string) (*valkey.Lua, []string) {
	rws, ok := rewrites[mutant.Active()]
	if !ok {
		return s, args
	}
	if mutant.Is(mutant.GatewayClock) {
		now := time.Now()
		if mutant.IsGatewayB() {
			now = now.Add(gatewayClockSkew)
		}
		args = append(args, strconv.FormatInt(now.UnixMilli(), 10))
	}
	mutatedMu.Lock()
	defer mutatedMu.Unlock()
	if m, ok := mutated[s]; ok {
		return m, args
	}
	src := scriptSource(s)
	for _, rw := range rws {
		if rw.script == "" || scripts()[rw.script] == s {
			src = strings.Replace(src, rw.old, rw.new, 1)
		}
	}
	m := registerScriptText(valkey.NewLuaScript(src), src)
	mutated[s] = m
	return m, args
}
