package kindengine

// Probes (quotaqual probe exec'd in the source pod) and the proof at start-up that the
// cluster enforces NetworkPolicy.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/k8s"
)

// probeAddr is where a probe from → to:port dials: to's Service name when the Service has
// that port, to's pod address otherwise, 127.0.0.1 for a host probing itself.
func (t *kindTopo) probeAddr(ctx context.Context, from, to string, port int) (string, error) {
	p := strconv.Itoa(port)
	if from == to {
		return net.JoinHostPort("127.0.0.1", p), nil
	}
	switch {
	case to == topology.HostValkey && port == kindPorts.Valkey,
		topology.IsGateway(to) && (port == kindPorts.GatewayData || port == kindPorts.GatewayAdmin),
		topology.SiteOf(to) != "" && (port == kindPorts.ProviderData || port == kindPorts.ProviderAdmin):
		return net.JoinHostPort(t.svcHost(to), p), nil
	}
	pod, err := t.readyPod(ctx, to)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(pod.Status.PodIP, p), nil
}

func (t *kindTopo) Probe(ctx context.Context, from, to string, port int) topology.ProbeResult {
	res := topology.ProbeResult{From: from, To: to, Port: port, Supported: true}
	known := func(h string) bool { return slices.Contains(t.hosts(), h) }
	if !(known(from) || from == topology.HostObserver) || !known(to) {
		res.Error = fmt.Sprintf("unknown host (from %q, to %q)", from, to)
		return res
	}
	if from == topology.HostValkey {
		res.Supported = false
		res.Error = "the valkey image has no quotaqual binary to probe from"
		return res
	}
	start := time.Now()
	defer func() {
		if res.Elapsed == 0 {
			res.Elapsed = time.Since(start)
		}
	}()
	// Until the probe program reports, nothing was observed: a failure of the harness (no
	// ready pod, the API, the exec, a cancelled context) is not a denied connection.
	didNotRun := func(err error) topology.ProbeResult {
		res.Supported, res.Error = false, "the probe did not run: "+err.Error()
		return res
	}
	pod, err := t.readyPod(ctx, from)
	if err != nil {
		return didNotRun(err)
	}
	addr, err := t.probeAddr(ctx, from, to, port)
	if err != nil {
		return didNotRun(err)
	}
	ectx, cancel := context.WithTimeout(ctx, kindExecTimeout)
	defer cancel()
	out, err := t.exec(ectx, pod.Name, []string{k8s.QuotaqualInContainer, "probe", "--to", addr, "--timeout", topology.ProbeTimeout.String()})
	if err != nil {
		return didNotRun(err)
	}
	topology.ReadProbeOutput(out, &res)
	return res
}

// proveEnforcement waits until a negative control (client → valkey) is denied while a
// positive control (gateway-a → valkey) reaches, and records the proof.
func (t *kindTopo) proveEnforcement(ctx context.Context) {
	// The deadline bounds the waiting, not the probes: a probe cut short by it would report
	// the deadline instead of what the network did.
	start := time.Now()
	deadline := time.NewTimer(kindPolicyLiveWait)
	defer deadline.Stop()
	var neg, pos topology.ProbeResult
	for {
		pos = t.Probe(ctx, topology.HostGatewayA, topology.HostValkey, kindPorts.Valkey)
		neg = t.Probe(ctx, topology.HostClient, topology.HostValkey, kindPorts.Valkey)
		if pos.Supported && pos.Reached && neg.Supported && !neg.Reached && neg.Error != "" {
			t.mu.Lock()
			t.enforced = true
			t.proof = []string{
				fmt.Sprintf("positive control gateway-a → valkey:%d reached in %s", kindPorts.Valkey, pos.Elapsed.Round(time.Microsecond)),
				fmt.Sprintf("negative control client → valkey:%d denied (%s) %s after the rollout", kindPorts.Valkey, neg.Error, time.Since(start).Round(time.Millisecond)),
			}
			t.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
		case <-deadline.C:
		case <-time.After(time.Second):
			continue
		}
		t.mu.Lock()
		t.enforced = false
		t.enforceWhy = fmt.Sprintf("NetworkPolicy is not enforced in this cluster: within %s the negative control client → valkey was %s and the positive control gateway-a → valkey was %s (does the CNI implement NetworkPolicy?)",
			topology.ElapsedSince(start).Round(time.Second), probeState(neg), probeState(pos))
		t.proof = []string{t.enforceWhy}
		t.mu.Unlock()
		return
	}
}

func probeState(p topology.ProbeResult) string {
	switch {
	case !p.Supported && p.Error != "":
		return "not observed (" + p.Error + ")"
	case !p.Supported:
		return "not supported"
	case p.Reached:
		return "reached"
	}
	return "not reached (" + p.Error + ")"
}
