package enginetest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/internal/e2e"
)

// CheckNemesisLevers pulls each nemesis lever the topology offers (topology.NemesisLevers) on
// a running topology and checks what a gateway shows of it, and that Undo heals it:
//   - pause gateway-a: it answers nothing within a second while gateway-b serves; resumed, it
//     serves again;
//   - store-stall: admission is a 503 within a second (the store timeout), then recovers;
//   - store-memory-pressure: admission is a 503, then recovers, with maxmemory restored;
//   - loss of 100 % between gateway-a and valkey, where the engine has it: gateway-a answers
//     503, gateway-b serves; healed, gateway-a recovers.
//
// A lever the engine lacks must say why (Available's reason). No error of a store command
// may carry the store's password.
func CheckNemesisLevers(t *testing.T, topo topology.Topology, d *deployment.Deployment) {
	t.Helper()
	ctx := context.Background()
	gwA, gwB := topology.HostGatewayA, topology.HostGatewayB
	for _, l := range append(topology.NemesisLevers(), topology.LinkLevers()...) {
		if ok, why := l.Available(topo); !ok && why == "" {
			t.Errorf("%s unavailable on %s without a reason", l.Name(), topo.Engine())
		}
	}

	if ok, why := topology.Pause.Available(topo); !ok {
		t.Errorf("pause unavailable on %s: %s", topo.Engine(), why)
	} else {
		undo, err := topology.Pause.Inject(ctx, topo, topology.Target{Host: gwA})
		if err != nil {
			t.Fatal(err)
		}
		if code, err := quickChat(topo, gwA, d, time.Second); err == nil {
			t.Errorf("paused gateway-a answered %d", code)
		}
		if code, _ := Chat(t, topo, gwB, d); !decided(code) {
			t.Errorf("gateway-b while gateway-a is paused: %d, want a decision from the store (200, or 429 once the budget is spent)", code)
		}
		if err := undo(ctx); err != nil {
			t.Fatal(err)
		}
		if err := undo(ctx); err != nil {
			t.Errorf("a second undo: %v", err)
		}
		WaitStoreBack(t, topo, gwA, d, 10*time.Second)
	}

	if ok, why := topology.StoreStall.Available(topo); !ok {
		t.Errorf("store-stall unavailable on %s: %s", topo.Engine(), why)
	} else {
		undo, err := topology.StoreStall.Inject(ctx, topo, topology.Target{Host: topology.HostValkey, Duration: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		code, _ := Chat(t, topo, gwB, d)
		if took := time.Since(start); code != http.StatusServiceUnavailable || took > 2*time.Second {
			t.Errorf("chat while the store stalls: %d after %s, want 503 within the store timeout", code, took)
		}
		if err := undo(ctx); err != nil {
			t.Fatal(err)
		}
		WaitStoreBack(t, topo, gwB, d, 3*time.Second) // well before the pause would have ended
	}

	if ok, why := topology.StoreMemoryPressure.Available(topo); !ok {
		t.Errorf("store-memory-pressure unavailable on %s: %s", topo.Engine(), why)
	} else {
		admin := topo.(topology.StoreAdmin)
		was, err := admin.StoreCommand(ctx, "CONFIG", "GET", "maxmemory")
		if err != nil {
			t.Fatal(err)
		}
		undo, err := topology.StoreMemoryPressure.Inject(ctx, topo, topology.Target{Host: topology.HostValkey})
		if err != nil {
			t.Fatal(err)
		}
		// A subject with room (application-b: the chats above spend application-a, and under
		// load WaitStoreBack's retries can spend it all): a spent subject's denial needs no
		// write, so the store decides it — a 429 — even while it refuses writes.
		if code, _ := e2e.Chat(t, topo, gwB, d, deployment.Subjects[1], 10*time.Second, t.Fatalf); code != http.StatusServiceUnavailable {
			t.Errorf("chat while the store refuses writes: %d, want 503", code)
		}
		if err := undo(ctx); err != nil {
			t.Fatal(err)
		}
		if now, err := admin.StoreCommand(ctx, "CONFIG", "GET", "maxmemory"); err != nil || now != was {
			t.Errorf("maxmemory after undo: %q %v, want %q", now, err, was)
		}
		WaitStoreBack(t, topo, gwB, d, 5*time.Second)
		_, err = admin.StoreCommand(ctx, "NO-SUCH-COMMAND", d.ValkeyPassword)
		if err == nil || strings.Contains(err.Error(), d.ValkeyPassword) {
			t.Errorf("a failing store command: %v (must fail, without the password)", err)
		}
	}

	if ok, why := topology.Loss.Available(topo); !ok {
		t.Logf("loss unavailable on %s: %s", topo.Engine(), why)
		return
	}
	undo, err := topology.Loss.Inject(ctx, topo, topology.Target{Host: gwA, Peer: topology.HostValkey, Percent: 100})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, _ := Chat(t, topo, gwA, d)
	t.Logf("chat via gateway-a losing every packet to and from valkey: %d after %s (store timeout %s)", code, time.Since(start).Round(time.Millisecond), d.Profile.StoreTimeout)
	if code != http.StatusServiceUnavailable {
		t.Errorf("chat via gateway-a losing every packet from valkey: %d, want 503", code)
	}
	if code, _ := Chat(t, topo, gwB, d); !decided(code) {
		t.Errorf("chat via gateway-b during gateway-a's loss: %d, want a decision from the store (200, or 429 once the budget is spent)", code)
	}
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	WaitStoreBack(t, topo, gwA, d, 10*time.Second)
	t.Logf("gateway-a decided again %s after the loss was healed", time.Since(healed).Round(time.Millisecond))
}

// decided: the gateway decided with the store (the test's requests may spend the subject's
// budget, so a 429 counts as much as a 200).
func decided(code int) bool { return code == http.StatusOK || code == http.StatusTooManyRequests }

// quickChat is Chat with a short deadline that returns a transport failure instead of failing
// the test: a paused gateway answers nothing.
func quickChat(topo topology.Topology, gateway string, d *deployment.Deployment, within time.Duration) (int, error) {
	code, _, err := e2e.Send(topo, gateway, d, deployment.Subjects[0], within)
	return code, err
}
