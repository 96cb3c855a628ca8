package valkeyproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A replicated store: one primary, one replica and Sentinels that promote the replica when the
// primary is gone, all real valkey-server processes. The topology engines and the tests start
// it the same way.

// ReplicatedOptions configure a replicated store. Each node's Options set where it runs (Dir,
// Host, Wrap, ...); Port 0 picks a free one.
type ReplicatedOptions struct {
	MasterName string // the name the Sentinels monitor; default "quotaqual"
	Primary    Options
	Replica    Options
	// MoreReplicas are further replicas. With one replica, a write acknowledged by one replica
	// cannot be acknowledged again after a failover until the old primary rejoins; a second
	// replica keeps the promoted primary acknowledged at once.
	MoreReplicas []Options
	Sentinels    []Options // three by default (Dir required in each)
	Quorum       int       // Sentinels that must agree the primary is down; default 2
	// DownAfter: how long a node must not answer before a Sentinel deems it down (default 1s);
	// FailoverTimeout: Sentinel's failover-timeout (default 3s). Short, so that a promotion
	// completes within a few seconds.
	DownAfter       time.Duration
	FailoverTimeout time.Duration
	// MinReplicasToWrite > 0 sets min-replicas-to-write and min-replicas-max-lag on both data
	// nodes: a primary that has lost its replicas for MinReplicasMaxLag refuses writes.
	MinReplicasToWrite int
	MinReplicasMaxLag  time.Duration
}

// Replicated is a running replicated store.
type Replicated struct {
	MasterName string
	Primary    *Server   // the node started as primary (it may be a replica after a failover)
	Replica    *Server   // the node started as replica
	Replicas   []*Server // every node started as replica (Replica first)
	Sentinels  []*Server
	// Dial, when set, is how the questions to the nodes and Sentinels are connected (the
	// docker engine relays them into the containers); nil dials directly.
	Dial Dialer
}

// Remote is a server this package did not start and cannot stop (a container's), known by its
// address and password, for a Replicated assembled by hand.
func Remote(host string, port int, password string) *Server {
	return &Server{opts: Options{Host: host, Port: port, Password: password}}
}

// Password is the server's requirepass.
func (s *Server) Password() string { return s.opts.Password }

// StartReplicated starts the primary, then the replica and waits until it is in sync, then the
// Sentinels (so each learns of the replica from its first INFO). On error, whatever started is
// killed.
func StartReplicated(ctx context.Context, o ReplicatedOptions) (*Replicated, error) {
	if o.MasterName == "" {
		o.MasterName = "quotaqual"
	}
	if o.Quorum == 0 {
		o.Quorum = 2
	}
	if o.DownAfter == 0 {
		o.DownAfter = time.Second
	}
	if o.FailoverTimeout == 0 {
		o.FailoverTimeout = 3 * time.Second
	}
	if len(o.Sentinels) == 0 {
		return nil, errors.New("valkeyproc: a replicated store needs Sentinels (three, each with its own Dir)")
	}
	r := &Replicated{MasterName: o.MasterName}
	fail := func(err error) (*Replicated, error) {
		r.Kill()
		return nil, err
	}
	// Every data node may become a replica of another after a failover.
	o.Primary.MasterAuth = o.Primary.Password
	// A replica's full sync otherwise waits 5 s (repl-diskless-sync-delay) for more replicas
	// to share one transfer: too long for a topology that comes up in a second.
	noDelay := []string{"--repl-diskless-sync-delay", "0"}
	o.Primary.ExtraArgs = append(o.Primary.ExtraArgs, noDelay...)
	o.Replica.ExtraArgs = append(o.Replica.ExtraArgs, noDelay...)
	for i := range o.MoreReplicas {
		o.MoreReplicas[i].ExtraArgs = append(o.MoreReplicas[i].ExtraArgs, noDelay...)
	}
	if o.MinReplicasToWrite > 0 {
		lag := max(1, int(o.MinReplicasMaxLag/time.Second))
		extra := []string{"--min-replicas-to-write", strconv.Itoa(o.MinReplicasToWrite), "--min-replicas-max-lag", strconv.Itoa(lag)}
		o.Primary.ExtraArgs = append(o.Primary.ExtraArgs, extra...)
		o.Replica.ExtraArgs = append(o.Replica.ExtraArgs, extra...)
	}
	var err error
	if r.Primary, err = Start(ctx, o.Primary); err != nil {
		return fail(fmt.Errorf("primary: %w", err))
	}
	for i, ro := range append([]Options{o.Replica}, o.MoreReplicas...) {
		ro.ExtraArgs = append(ro.ExtraArgs, "--replicaof", r.Primary.Host(), strconv.Itoa(r.Primary.Port()))
		ro.MasterAuth = o.Primary.Password
		s, err := Start(ctx, ro)
		if err != nil {
			return fail(fmt.Errorf("replica %d: %w", i+1, err))
		}
		r.Replicas = append(r.Replicas, s)
	}
	r.Replica = r.Replicas[0]
	for _, s := range r.Replicas {
		if err := waitFor(ctx, 10*time.Second, "the replica's initial sync", func(ctx context.Context) (bool, error) {
			info, err := Info(ctx, s.Addr(), s.opts.Password, "replication")
			return err == nil && info["master_link_status"] == "up", err
		}); err != nil {
			return fail(err)
		}
	}
	for i, so := range o.Sentinels {
		off := false
		so.AppendOnly = &off
		so.Sentinel = sentinelConf(o, r.Primary)
		s, err := Start(ctx, so)
		if err != nil {
			return fail(fmt.Errorf("sentinel %d: %w", i+1, err))
		}
		r.Sentinels = append(r.Sentinels, s)
	}
	return r, nil
}

func sentinelConf(o ReplicatedOptions, primary *Server) string {
	return SentinelConfig(o, primary.Host(), primary.Port(), primary.opts.Password)
}

// SentinelConfig is the configuration of a Sentinel that monitors the primary at host:port
// (o's MasterName, Quorum, DownAfter and FailoverTimeout, which must be set).
func SentinelConfig(o ReplicatedOptions, host string, port int, password string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sentinel monitor %s %s %d %d\n", o.MasterName, host, port, o.Quorum)
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", o.MasterName, o.DownAfter.Milliseconds())
	fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", o.MasterName, o.FailoverTimeout.Milliseconds())
	fmt.Fprintf(&b, "sentinel parallel-syncs %s 1\n", o.MasterName)
	if password != "" {
		fmt.Fprintf(&b, "sentinel auth-pass %s %q\n", o.MasterName, password)
	}
	return b.String()
}

// SentinelAddrs are the Sentinels' host:port.
func (r *Replicated) SentinelAddrs() []string {
	out := make([]string, len(r.Sentinels))
	for i, s := range r.Sentinels {
		out[i] = s.Addr()
	}
	return out
}

// Nodes are the data nodes, the one started as primary first.
func (r *Replicated) Nodes() []*Server { return append([]*Server{r.Primary}, r.Replicas...) }

// WaitSentinelsReady waits until every Sentinel knows the primary, the replica and the other
// Sentinels: before that, a failover may find no quorum or no replica to promote. Sentinels
// find each other by hello messages every 2 s, so this takes up to ~2 s after the start.
func (r *Replicated) WaitSentinelsReady(ctx context.Context, timeout time.Duration) error {
	return waitFor(ctx, timeout, "the Sentinels to know each other and the replica", func(ctx context.Context) (bool, error) {
		for _, s := range r.Sentinels {
			m, err := r.sentinelMaster(ctx, s)
			if err != nil {
				return false, err
			}
			if m["num-other-sentinels"] != strconv.Itoa(len(r.Sentinels)-1) || m["num-slaves"] != strconv.Itoa(len(r.Replicas)) {
				return false, fmt.Errorf("sentinel %s: %s other sentinels, %s replicas", s.Addr(), m["num-other-sentinels"], m["num-slaves"])
			}
		}
		return true, nil
	})
}

func (r *Replicated) sentinelMaster(ctx context.Context, s *Server) (map[string]string, error) {
	rep, err := DoVia(ctx, r.Dial, s.Addr(), "", "SENTINEL", "MASTER", r.MasterName)
	if err != nil {
		return nil, err
	}
	arr, _ := rep.([]any)
	m := map[string]string{}
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		v, _ := arr[i+1].(string)
		m[k] = v
	}
	return m, nil
}

// PrimaryAddr asks the Sentinels which node is primary: the address a majority of those that
// answer name (SENTINEL GET-MASTER-ADDR-BY-NAME), or an error when they do not agree.
func (r *Replicated) PrimaryAddr(ctx context.Context) (string, error) {
	votes := map[string]int{}
	answered := 0
	var lastErr error
	for _, s := range r.Sentinels {
		rep, err := DoVia(ctx, r.Dial, s.Addr(), "", "SENTINEL", "GET-MASTER-ADDR-BY-NAME", r.MasterName)
		if err != nil {
			lastErr = err
			continue
		}
		arr, _ := rep.([]any)
		if len(arr) != 2 {
			continue
		}
		h, _ := arr[0].(string)
		p, _ := arr[1].(string)
		answered++
		votes[net.JoinHostPort(h, p)]++
	}
	for addr, n := range votes {
		if 2*n > len(r.Sentinels) {
			return addr, nil
		}
	}
	if answered == 0 && lastErr != nil {
		return "", fmt.Errorf("no Sentinel answered: %w", lastErr)
	}
	return "", fmt.Errorf("the Sentinels do not agree on a primary: %v", votes)
}

// NodeAt returns the data node at addr, or nil.
func (r *Replicated) NodeAt(addr string) *Server {
	for _, n := range r.Nodes() {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Role reports a data node's INFO replication role ("master" or "slave") and replication
// offset.
func Role(ctx context.Context, s *Server) (role string, offset int64, err error) {
	info, err := Info(ctx, s.Addr(), s.opts.Password, "replication")
	if err != nil {
		return "", 0, err
	}
	key := "master_repl_offset"
	off, _ := strconv.ParseInt(info[key], 10, 64)
	return info["role"], off, nil
}

// Kill kills every node (ignoring ones that never started).
func (r *Replicated) Kill() {
	for _, s := range append(append([]*Server{r.Primary}, r.Replicas...), r.Sentinels...) {
		if s != nil {
			_ = s.Kill()
		}
	}
}

// Pause freezes the process (SIGSTOP): it neither answers nor replicates, as if cut off by a
// silent network, until Resume. A harness without network namespaces uses it for a partition.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("valkeyproc: not running")
	}
	return s.cmd.Process.Signal(sig)
}

// waitFor polls cond every 50 ms until it holds, ctx ends or timeout passes; the error names
// what was awaited and the condition's last error.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("valkeyproc: waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-tick.C:
		}
	}
}
