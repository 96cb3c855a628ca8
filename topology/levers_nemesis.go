package topology

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The nemeses: faults that are neither a crash nor a cut, as Lever values (lever.go) written
// once against the primitives engines provide — Pauser for a frozen component, StoreAdmin for
// the store's own levers, Lossy for packet loss on a pair. What this kernel cannot do (no tc
// netem, no per-process wall-clock skew) is in docs/nemeses.md.

// Pause freezes Target.Host (SIGSTOP of its process group, or docker pause) until Undo thaws
// it: its sockets stay open, its peers see silence rather than a refused connection, its
// timers (lease renewals) do not fire, and on thaw it carries on as if no time had passed.
var Pause Lever = pauseLever{}

type pauseLever struct{}

func (pauseLever) Name() string { return "pause" }

func (pauseLever) Available(t Topology) (bool, string) {
	if _, ok := t.(Pauser); !ok {
		return false, fmt.Sprintf("the %s engine cannot pause a component (no Pauser)", t.Engine())
	}
	return true, ""
}

func (l pauseLever) Inject(ctx context.Context, t Topology, target Target) (Undo, error) {
	p, ok := t.(Pauser)
	if !ok {
		_, why := l.Available(t)
		return nil, fmt.Errorf("pause %s: %s: %w", target.Host, why, ErrUnsupported)
	}
	if target.Host == "" {
		return nil, errors.New("pause: Target.Host is empty: name the component to pause (gateway-a, valkey, …)")
	}
	if err := p.PauseHost(ctx, target.Host); err != nil {
		// A half-frozen process group thaws again: nothing is left injected.
		_ = p.ResumeHost(context.WithoutCancel(ctx), target.Host)
		return nil, fmt.Errorf("pause %s: %w", target.Host, err)
	}
	return once(func(ctx context.Context) error {
		if err := p.ResumeHost(ctx, target.Host); err != nil {
			return fmt.Errorf("resume %s: %w", target.Host, err)
		}
		return nil
	}), nil
}

// StoreStall stalls the store for Target.Duration with CLIENT PAUSE … WRITE: every command
// that may write — each of the ledger's scripts: a reservation, a renewal, a settlement —
// waits in the server, unanswered, until the pause ends or Undo sends CLIENT UNPAUSE, while
// reads, PING and AUTH still answer (a store stalled on a fork or a slow disk looks so: alive
// and ready, and not doing its work). The server keeps its state and its connections; a
// command whose client gave up meanwhile is dropped with the connection, not run later.
// (CLIENT PAUSE … ALL is not used: it holds AUTH too, so no new connection could unpause it.)
var StoreStall Lever = storeStall{}

type storeStall struct{}

func (storeStall) Name() string { return "store-stall" }

func (s storeStall) Available(t Topology) (bool, string) { return storeAdminAvailable(t) }

func (s storeStall) Inject(ctx context.Context, t Topology, target Target) (Undo, error) {
	a, err := storeAdmin(t, s.Name())
	if err != nil {
		return nil, err
	}
	if target.Duration <= 0 {
		return nil, fmt.Errorf("%s: Target.Duration is %s: give the stall a length (CLIENT PAUSE needs one; Undo may end it early)", s.Name(), target.Duration)
	}
	msec := strconv.FormatInt(target.Duration.Milliseconds(), 10)
	if _, err := a.StoreCommand(ctx, "CLIENT", "PAUSE", msec, "WRITE"); err != nil {
		return nil, fmt.Errorf("%s: CLIENT PAUSE %s WRITE: %w", s.Name(), msec, err)
	}
	return once(func(ctx context.Context) error {
		if _, err := a.StoreCommand(ctx, "CLIENT", "UNPAUSE"); err != nil {
			return fmt.Errorf("%s: CLIENT UNPAUSE: %w", s.Name(), err)
		}
		return nil
	}), nil
}

// StoreMemoryPressure sets the store's maxmemory below what it uses, with the noeviction
// policy: every command that may grow memory (a reservation, a settlement, a renewal) is
// refused with an OOM error while reads still answer, as a store that ran out of memory does.
// Undo restores both settings as they were.
var StoreMemoryPressure Lever = storeMemoryPressure{}

type storeMemoryPressure struct{}

func (storeMemoryPressure) Name() string { return "store-memory-pressure" }

func (storeMemoryPressure) Available(t Topology) (bool, string) { return storeAdminAvailable(t) }

// memoryPressureBelow is how far below used_memory maxmemory goes: with maxmemory just above
// it a small write still passes (the check runs against memory before the command), and a
// limit far below holds however the server's own usage moves meanwhile.
const memoryPressureBelow = 200_000

func (l storeMemoryPressure) Inject(ctx context.Context, t Topology, _ Target) (Undo, error) {
	a, err := storeAdmin(t, l.Name())
	if err != nil {
		return nil, err
	}
	maxmem, err := configGet(ctx, a, "maxmemory")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.Name(), err)
	}
	policy, err := configGet(ctx, a, "maxmemory-policy")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.Name(), err)
	}
	info, err := a.StoreCommand(ctx, "INFO", "memory")
	if err != nil {
		return nil, fmt.Errorf("%s: INFO memory: %w", l.Name(), err)
	}
	used, err := infoInt(info, "used_memory")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.Name(), err)
	}
	restore := once(func(ctx context.Context) error {
		var errs []error
		if _, err := a.StoreCommand(ctx, "CONFIG", "SET", "maxmemory", maxmem); err != nil {
			errs = append(errs, fmt.Errorf("restoring maxmemory %s: %w", maxmem, err))
		}
		if _, err := a.StoreCommand(ctx, "CONFIG", "SET", "maxmemory-policy", policy); err != nil {
			errs = append(errs, fmt.Errorf("restoring maxmemory-policy %s: %w", policy, err))
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("%s: %w", l.Name(), err)
		}
		return nil
	})
	if _, err := a.StoreCommand(ctx, "CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: CONFIG SET maxmemory-policy noeviction: %w", l.Name(), err), restore(context.WithoutCancel(ctx)))
	}
	limit := max(1, used-memoryPressureBelow)
	if _, err := a.StoreCommand(ctx, "CONFIG", "SET", "maxmemory", strconv.FormatInt(limit, 10)); err != nil {
		return nil, errors.Join(fmt.Errorf("%s: CONFIG SET maxmemory %d: %w", l.Name(), limit, err), restore(context.WithoutCancel(ctx)))
	}
	return restore, nil
}

// Lossy is the primitive behind the loss lever: drop percent of the packets host receives
// from peer (nftables `numgen random mod 100 < percent drop`, in host's own namespace), and
// stop dropping them. Percent 0 removes the rule. An engine whose Lossy cannot work in this
// run (its harness cannot reach the namespaces) says why with a LossReason() string method.
type Lossy interface {
	SetLoss(ctx context.Context, host, peer string, percent int) error
}

// Loss drops Target.Percent % of the packets between Target.Host and Target.Peer, both
// directions (each side drops that share of what it receives from the other), until Undo.
// Live connections stay open: TCP retransmits, so a store call meets a delay — often past the
// store timeout — rather than a refusal, and a write may be applied with its answer lost.
var Loss Lever = lossLever{}

type lossLever struct{}

func (lossLever) Name() string { return "loss" }

func (lossLever) Available(t Topology) (bool, string) {
	ls, ok := t.(Lossy)
	if !ok {
		return false, fmt.Sprintf("the %s engine cannot drop a share of a pair's packets (no Lossy)", t.Engine())
	}
	if r, ok := ls.(interface{ LossReason() string }); ok {
		if why := r.LossReason(); why != "" {
			return false, why
		}
	}
	return true, ""
}

func (l lossLever) Inject(ctx context.Context, t Topology, target Target) (Undo, error) {
	ls, ok := t.(Lossy)
	if !ok {
		_, why := l.Available(t)
		return nil, fmt.Errorf("loss %s–%s: %s: %w", target.Host, target.Peer, why, ErrUnsupported)
	}
	if target.Percent < 1 || target.Percent > 100 {
		return nil, fmt.Errorf("loss: Target.Percent is %d: use 1 to 100", target.Percent)
	}
	if target.Host == "" || target.Peer == "" || target.Host == target.Peer {
		return nil, fmt.Errorf("loss: Target.Host %q and Target.Peer %q must name two different hosts", target.Host, target.Peer)
	}
	heal := func(ctx context.Context) error {
		return errors.Join(ls.SetLoss(ctx, target.Host, target.Peer, 0), ls.SetLoss(ctx, target.Peer, target.Host, 0))
	}
	for _, side := range [][2]string{{target.Host, target.Peer}, {target.Peer, target.Host}} {
		if err := ls.SetLoss(ctx, side[0], side[1], target.Percent); err != nil {
			return nil, errors.Join(err, heal(context.WithoutCancel(ctx)))
		}
	}
	return once(heal), nil
}

// NemesisLevers lists the levers of this file, for schedules and documentation.
func NemesisLevers() []Lever {
	return []Lever{Pause, StoreStall, StoreMemoryPressure, Loss}
}

// storeAdminReasoner is an engine that can say why StoreCommand cannot reach this run's store.
type storeAdminReasoner interface{ StoreAdminReason() string }

func storeAdminAvailable(t Topology) (bool, string) {
	return offers[StoreAdmin](t, "the %s engine cannot send the store an admin command (no StoreAdmin)", storeAdminReasoner.StoreAdminReason)
}

func storeAdmin(t Topology, lever string) (StoreAdmin, error) {
	if ok, why := storeAdminAvailable(t); !ok {
		return nil, fmt.Errorf("%s: %s: %w", lever, why, ErrUnsupported)
	}
	return t.(StoreAdmin), nil
}

// configGet reads one CONFIG GET value (the reply is "name value" as StoreCommand renders it).
func configGet(ctx context.Context, a StoreAdmin, name string) (string, error) {
	out, err := a.StoreCommand(ctx, "CONFIG", "GET", name)
	if err != nil {
		return "", fmt.Errorf("CONFIG GET %s: %w", name, err)
	}
	f := strings.Fields(out)
	if len(f) != 2 || f[0] != name {
		return "", fmt.Errorf("CONFIG GET %s: unexpected reply %q", name, out)
	}
	return f[1], nil
}

// infoInt reads one integer field of an INFO reply.
func infoInt(info, field string) (int64, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO %s is %q, not a number", field, v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("INFO has no %s", field)
}

// ReplyText renders a RESP reply (valkeyproc.Do's: string, int64, []any, nil) as text:
// arrays space-separated, nil empty.
func ReplyText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = ReplyText(e)
		}
		return strings.Join(parts, " ")
	default:
		return fmt.Sprint(x)
	}
}

// StoreError is a store command's error as an engine may return it: the server echoes a
// command's arguments in some errors ("unknown command …, with args beginning with: …"), so
// the password and every argument after the verb are cut out of the text, and the verb named.
func StoreError(err error, password string, args []string) error {
	msg := err.Error()
	if password != "" {
		msg = strings.ReplaceAll(msg, password, "[redacted]")
	}
	for _, a := range args[1:] {
		if len(a) >= 4 {
			msg = strings.ReplaceAll(msg, a, "[arg]")
		}
	}
	return fmt.Errorf("store command %s: %s", args[0], msg)
}
