package chaos

import (
	"net/http"
	"slices"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
)

const (
	hardGateCheck = "hard gate: no subject's admitted usage within any window-long stretch exceeds the capacity"
	drainCheck    = "no acknowledged reservation lost: after the faults, draining every subject admits none past its capacity"
	linearCheck   = "every subject's history is linearizable against the ledger model (porcupine)"
)

// policyChange records a policy-change fault: gw on percent of the rule's capacity, certainly
// from from+1 to to, possibly from from to to+1; its history's limit span with it.
func (b *hist) policyChange(n int, gw string, percent, from, to int) {
	f := FaultEvent{Fault: Fault{N: n, Lever: PolicyChange.Name(), Target: topology.Target{Host: gw, Percent: percent}},
		Pulled: b.at(from), Held: b.at(from + 1), Releasing: b.at(to), Released: b.at(to + 1)}
	b.h.Faults = append(b.h.Faults, f)
	b.h.Limits = limitSpans(b.h.Faults)
}

// admit records n admissions of subject s on gw, 10 tokens each, 10 ms apart from ms on.
func (b *hist) admit(s, gw string, ms, n int) int {
	for range n {
		b.req(ms, gw, s, http.StatusOK)
		ms += 10
	}
	return ms
}

func hasCheck(v Verdict, name string) bool { return slices.Contains(failed(v), name) }

// A looser policy on one gateway: admissions up to its capacity are no over-admission, past
// it they are; and the same history without the rollout is over-admission.
func TestJudgePolicyChangeLooser(t *testing.T) {
	build := func(withRollout bool, n int) Verdict {
		b := newHist()
		if withRollout {
			b.policyChange(1, topology.HostGatewayA, 150, 100, 2000) // capacity 90
		}
		ms := b.admit("subject-001", topology.HostGatewayB, 0, 4)     // 40 of 60
		ms = b.admit("subject-001", topology.HostGatewayA, ms+200, n) // on the looser policy
		b.req(ms, topology.HostGatewayB, "subject-001", http.StatusTooManyRequests)
		b.req(2100, topology.HostGatewayA, "subject-002", http.StatusOK) // gateway-a decides after the release
		return Judge(b.h, testBounds)
	}
	if v := build(true, 4); v.Failed { // 80 ≤ 90
		t.Fatalf("80 tokens while gateway-a ran capacity 90 failed: %v %+v", failed(v), v.Checks)
	} else if v.Facts["policy_timeline"] == nil {
		t.Fatalf("no policy timeline in the facts: %v", v.Facts)
	}
	if v := build(false, 4); !hasCheck(v, hardGateCheck) || !hasCheck(v, linearCheck) { // 80 > 60
		t.Fatalf("80 tokens with no rollout: want the hard gate and porcupine failed, got %v", failed(v))
	}
	if v := build(true, 6); !hasCheck(v, hardGateCheck) || !hasCheck(v, linearCheck) { // 100 > 90
		t.Fatalf("100 tokens while the largest capacity was 90: want the hard gate and porcupine failed, got %v", failed(v))
	}
}

// A tighter policy on one gateway never excuses over-admission against the rule's capacity
// still running on the other, and denials on the tighter gateway are judged by its capacity:
// legal there, spurious on the other gateway.
func TestJudgePolicyChangeTighter(t *testing.T) {
	build := func(denyOn string, n int) Verdict {
		b := newHist()
		b.policyChange(1, topology.HostGatewayA, 50, 0, 5000)            // capacity 30 on gateway-a
		ms := b.admit("subject-001", topology.HostGatewayB, 100, n)      // on the rule's 60
		b.req(ms, denyOn, "subject-001", http.StatusTooManyRequests)     // 30 used (45 held at most): no room in 30, room in 60
		b.req(5100, topology.HostGatewayA, "subject-002", http.StatusOK) // decided after the release
		return Judge(b.h, testBounds)
	}
	if v := build(topology.HostGatewayA, 3); v.Failed {
		t.Fatalf("a denial on the tighter gateway with 30 of its 30 used failed: %v %+v", failed(v), v.Checks)
	}
	if v := build(topology.HostGatewayB, 3); !slices.Equal(failed(v), []string{linearCheck}) {
		t.Fatalf("a denial on the rule's gateway with room: want only porcupine failed, got %v", failed(v))
	}
	if v := build(topology.HostGatewayA, 7); !hasCheck(v, hardGateCheck) { // 70 > 60, whatever gateway-a ran
		t.Fatalf("70 tokens while gateway-b ran 60: want the hard gate failed, got %v", failed(v))
	}
	// With gateway-a the only gateway, the tighter capacity is the only one in effect.
	b := newHist()
	b.h.Gateways = []string{topology.HostGatewayA}
	b.policyChange(1, topology.HostGatewayA, 50, 0, 5000)
	ms := b.admit("subject-001", topology.HostGatewayA, 100, 4) // 40 > 30
	b.req(ms, topology.HostGatewayA, "subject-001", http.StatusTooManyRequests)
	if v := Judge(b.h, testBounds); !hasCheck(v, hardGateCheck) || !hasCheck(v, linearCheck) {
		t.Fatalf("40 tokens while the only gateway ran 30: want the hard gate and porcupine failed, got %v", failed(v))
	}
}

// failover records a store failover: cut at from, promoted at promoted, healed at to.
func (b *hist) failover(n, from, promoted, to int, replication string) {
	b.h.StoreGroup, b.h.Replication = true, replication
	b.h.Faults = append(b.h.Faults, FaultEvent{Fault: Fault{N: n, Lever: topology.StoreFailover.Name(), Target: topology.Target{Host: topology.StorePrimaryHost}},
		Pulled: b.at(from), Held: b.at(promoted), Releasing: b.at(to), Released: b.at(to + 1), Touches: twoGateways})
}

// Across a failover with async replication, a subject's admissions answered just before the
// cut may be lost and their tokens admitted again: allowed, for that subject only, and
// recorded; a subject whose admissions were answered long before the cut gets no allowance,
// so its re-admission fails. With acknowledged replication nothing is allowed.
func TestJudgeFailoverLoss(t *testing.T) {
	build := func(replication string, lateMS int) Verdict {
		b := newHist()
		b.failover(1, 3000, 6000, 7000, replication)
		b.admit("subject-001", topology.HostGatewayA, lateMS, 4)                    // 40, the cut at 3000
		ms := b.admit("subject-001", topology.HostGatewayB, 6100, 6)                // 60 more after the promotion: 100
		b.req(ms, topology.HostGatewayA, "subject-001", http.StatusTooManyRequests) // the promoted primary's 60 spent
		b.spend("subject-002", 7100, 5)                                             // both gateways decide after the heal
		return Judge(b.h, testBounds)
	}
	v := build(deployment.ReplicationAsync, 2900)
	if v.Failed {
		t.Fatalf("async: 40 tokens answered just before the cut and re-spent failed: %v %+v", failed(v), v.Checks)
	}
	if ex, _ := v.Facts["failover_exemptions"].([]string); len(ex) != 1 || !containsSub(ex[0], "subject-001: 4 admissions, 40 tokens") {
		t.Fatalf("the exemption is not recorded as a fact: %v", v.Facts["failover_exemptions"])
	}
	if v.Facts["keys_left_out_failover_may_lose"] != 1 {
		t.Fatalf("want subject-001's key left out of porcupine, facts %v", v.Facts)
	}
	// Answered 1.8 s before the cut: replicated, not lost by the failover — a lost reservation.
	if v := build(deployment.ReplicationAsync, 1000); !hasCheck(v, hardGateCheck) || !hasCheck(v, drainCheck) || !hasCheck(v, linearCheck) {
		t.Fatalf("async, admissions long before the cut re-spent: want the hard gate, the drain and porcupine failed, got %v", failed(v))
	}
	if v := build(deployment.ReplicationAcknowledged, 2900); !hasCheck(v, hardGateCheck) || !hasCheck(v, linearCheck) {
		t.Fatalf("acknowledged: a re-spent reservation must fail, got %v", failed(v))
	} else if !containsSub(v.Facts["failover_rule"].(string), "nothing is exempted") {
		t.Fatalf("the failover rule is not stated: %v", v.Facts["failover_rule"])
	}
}
