package ledger

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valkey-io/valkey-go"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

// loadScript assembles a script: scripts/head.lua (clock, layout), then the script, with
// scripts/state.lua (the state read of the general layout) in place of its "-- @state" line and
// scripts/common.lua (the general machinery) in place of its "-- @common" line, so that a fast
// path returning before either line never builds what follows.
func loadScript(name string) *valkey.Lua {
	read := func(f string) string {
		b, err := scriptFS.ReadFile("scripts/" + f + ".lua")
		if err != nil {
			panic(err)
		}
		return string(b)
	}
	body := read(name)
	for _, part := range []string{"state", "common"} {
		marker := "\n-- @" + part + "\n"
		if strings.Count(body, marker) != 1 {
			panic("ledger: scripts/" + name + ".lua must have exactly one -- @" + part + " line")
		}
		body = strings.Replace(body, marker, "\n"+read(part)+"\n", 1)
	}
	src := read("head") + "\n" + body
	return registerScriptText(valkey.NewLuaScript(src), src)
}

var (
	reserveScript = loadScript("reserve")
	renewScript   = loadScript("renew")
	settleScript  = loadScript("settle")
	inspectScript = loadScript("inspect")
)

// ValkeyOptions configure the Valkey backend.
type ValkeyOptions struct {
	URL       string        // redis:// or rediss:// (also valkey://, valkeys://); may carry a password
	Namespace string        // prefix of every key; default "quotaqual"
	Timeout   time.Duration // bound on every call; default 300ms
	Limits    Limits        // per-instance bounds; zero fields take the defaults
	// AllowEviction accepts a store whose maxmemory-policy may evict keys (see eviction.go).
	AllowEviction bool
	// Sentinel, instead of URL: discover the primary through these Sentinels and follow a
	// promotion (valkey-go's Sentinel client).
	Sentinel *SentinelOptions
	// Cluster, instead of URL and Sentinel: a Valkey Cluster reached through these seed nodes
	// (valkey-go's cluster client; see valkey_cluster.go).
	Cluster *ClusterOptions
	// MinReplicas > 0: every state-changing call counts only when that many replicas
	// acknowledged it within AckTimeout (see valkey_ack.go). Zero: async, Valkey's default.
	MinReplicas int
	AckTimeout  time.Duration
}

// SentinelOptions name a Sentinel-managed primary.
type SentinelOptions struct {
	MasterName     string
	Addresses      []string // host:port of each Sentinel
	Password       string   // the Sentinels' AUTH; empty: none
	MasterPassword string   // the primary's and replicas' AUTH; empty: none
}

// sentinelRefresh is how often the Sentinel client re-asks which node is primary, besides
// following +switch-master announcements: a missed announcement (a partition between the
// client and its Sentinel at that moment) would otherwise bind it to a demoted primary.
const sentinelRefresh = time.Second

// Valkey is the shared backend: every Reserve, Renew, Settle and Inspect is one Lua script call
// (EVALSHA, falling back to EVAL after SCRIPT FLUSH or a restart), atomic on the store, on the
// store's clock (TIME). All keys of one quota key share one hash tag, so the scripts also run
// on Valkey Cluster. The connection is made lazily and re-made by valkey-go after failures, so
// a gateway may start before Valkey does; every call is bounded by the timeout and every
// failure is an error wrapping ErrStore, never an admission.
//
// A call whose connection broke under it (the first call on each pipe after a Valkey restart)
// is sent once more on a fresh connection within the same timeout. That is safe because every
// script is idempotent by reservation id: a repeated Reserve finds its reservation and reports
// it admitted without holding twice; a repeated Settle whose first attempt did apply reports
// Applied false (the usage is charged exactly once either way).
//
// max_keys and max_active_reservations bound what this instance tracks: a local map of the
// quota keys it wrote (forgotten when their store TTL would have run out) and of the
// reservations it holds (forgotten when settled, found expired, or past their lease).
type Valkey struct {
	ns      string
	timeout time.Duration
	limits  Limits
	ack     ackPolicy
	secrets []string // texts that must never appear in an error

	allowEviction bool // accept a maxmemory-policy that evicts
	cluster       bool // configured for a Valkey Cluster: refuse a single-node client

	cmu     sync.Mutex
	copt    valkey.ClientOption
	client  valkey.Client
	dialing chan struct{}
	dialErr error
	closed  bool

	layouts  sync.Map // *Quota -> *quotaLayout
	nlayouts atomic.Int64

	lmu        sync.Mutex
	keys       map[string]*trackedKey
	ids        map[string]int64 // reservation id -> local lease deadline (unix ms)
	pendingRes int              // Reserve calls in flight, each holding a reservation slot

	// Background releases of ambiguous reserves (valkey_release.go).
	rmu             sync.Mutex
	releasesClosed  bool // set by Close: no new release starts
	releaseSlots    chan struct{}
	releases        sync.WaitGroup
	releasesDone    atomic.Int64
	releasesNoop    atomic.Int64
	releasesFailed  atomic.Int64
	releasesDropped atomic.Int64
}

type trackedKey struct {
	expiryMs int64 // local unix ms after which the store has forgotten the key
	pending  int   // Reserve calls in flight for the key
}

// NewValkey returns a Valkey ledger. It does not contact Valkey (a gateway may start during an
// outage): the first call connects, and valkey-go reconnects after failures. It fails only on a
// malformed URL or namespace, and its errors never contain the URL or the password.
func NewValkey(opts ValkeyOptions) (*Valkey, error) {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if strings.ContainsAny(opts.Namespace, "{}") {
		return nil, errors.New("valkey backend: namespace must not contain '{' or '}' (they delimit the hash tag)")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MinReplicas < 0 || (opts.MinReplicas > 0 && (opts.AckTimeout < time.Millisecond || opts.AckTimeout >= opts.Timeout)) {
		return nil, errors.New("valkey backend: replication acknowledgement needs min_replicas ≥ 1 and 1ms ≤ ack_timeout < timeout")
	}
	if opts.Sentinel != nil && opts.Cluster != nil {
		return nil, errors.New("valkey backend: a Valkey Cluster has no Sentinels (its replicas are promoted by the cluster itself); configure either Sentinel or Cluster")
	}
	if opts.Sentinel != nil {
		return newValkey(opts, sentinelClientOption(opts), "", nil), nil
	}
	if opts.Cluster != nil {
		if len(opts.Cluster.Addresses) == 0 {
			return nil, errors.New("valkey backend: a Valkey Cluster needs at least one seed address (host:port)")
		}
		return newValkey(opts, clusterClientOption(opts), "", nil), nil
	}
	u, err := url.Parse(opts.URL)
	if err != nil {
		return nil, errors.New("valkey backend: the URL does not parse; write redis://[:password@]host:port[/db] or rediss://…")
	}
	switch u.Scheme {
	case "redis", "rediss", "valkey", "valkeys":
	default:
		return nil, fmt.Errorf("valkey backend: URL scheme %q is not supported; use redis:// or rediss://", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("valkey backend: the URL names no host; write redis://host:port")
	}
	copt, err := valkey.ParseURL(opts.URL)
	if err != nil {
		return nil, errors.New("valkey backend: the URL is not a valid Valkey URL (check its port, database number and query options)")
	}
	var userinfo []string
	if pw, ok := u.User.Password(); ok {
		userinfo = append(userinfo, pw)
	}
	if i := strings.LastIndex(u.User.String(), ":"); i >= 0 {
		userinfo = append(userinfo, u.User.String()[i+1:])
	}
	return newValkey(opts, copt, opts.URL, userinfo), nil
}

// sentinelClientOption is the client configuration for a Sentinel-managed primary.
func sentinelClientOption(opts ValkeyOptions) valkey.ClientOption {
	s := opts.Sentinel
	copt := valkey.ClientOption{
		InitAddress: append([]string(nil), s.Addresses...),
		Password:    s.MasterPassword,
		Sentinel: valkey.SentinelOption{
			MasterSet:               s.MasterName,
			Password:                s.Password,
			TopologyRefreshInterval: sentinelRefresh,
		},
	}
	copt.Sentinel.Dialer.Timeout = opts.Timeout
	return copt
}

// newValkey finishes a client configuration and builds the ledger around it. rawURL and
// userinfo are texts (besides the passwords) that must never appear in an error.
func newValkey(opts ValkeyOptions, copt valkey.ClientOption, rawURL string, userinfo []string) *Valkey {
	copt.Dialer.Timeout = opts.Timeout
	copt.ConnWriteTimeout = max(4*opts.Timeout, time.Second)
	copt.DisableCache = true
	// Under concurrency valkey-go pipelines calls; waiting up to 20µs after each flush lets more
	// calls share one write (fewer system calls on both sides: +10-15% reserve+settle pairs/s at
	// 64 goroutines on 2 cores). A lone call is still written at once: the delay follows a flush.
	copt.MaxFlushDelay = 20 * time.Microsecond
	// Every call goes through valkey-go's pipeline, even a lone one. Its synchronous path (a
	// lone call on an idle connection) closes the connection when the call's deadline passes,
	// so on a link whose replies come late but within the timeout, a fresh connection — a
	// handshake round trip, then the call's own — times out, is closed, and the next call pays
	// the handshake again: a store link slowed to 60 % of the timeout then failed every lone
	// call after a reconnect (TestReconnectThroughSlowRepliesDecidesAgain; lossy-store-link's
	// store-latency phase decided nothing for 4-6 s). Pipelined, a call that times out leaves
	// its connection up (its late reply is discarded) and the next call is answered in time.
	// A connection that stops answering altogether is still ended by valkey-go's PING after
	// Dialer.KeepAlive idle, unanswered within ConnWriteTimeout.
	copt.AlwaysPipelining = true
	v := &Valkey{
		ns:      opts.Namespace,
		timeout: opts.Timeout,
		limits:  opts.Limits.withDefaults(),
		ack:     ackPolicy{minReplicas: opts.MinReplicas, timeout: opts.AckTimeout},

		allowEviction: opts.AllowEviction,
		cluster:       opts.Cluster != nil,
		copt:          copt,
		keys:          make(map[string]*trackedKey),
		ids:           make(map[string]int64),

		releaseSlots: make(chan struct{}, maxReleasesInFlight),
	}
	v.secrets = append(v.secrets, rawURL)
	for _, pw := range []string{copt.Password, copt.Sentinel.Password} {
		if pw != "" {
			v.secrets = append(v.secrets, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
	}
	if copt.Password != "" {
		v.secrets = append(v.secrets, userinfo...)
	}
	// Connect in the background so the first call usually finds a connection; a failure here
	// is retried by the next call.
	v.cmu.Lock()
	v.startDialLocked()
	v.cmu.Unlock()
	return v
}

// Backend implements Ledger.
func (v *Valkey) Backend() string { return "valkey" }

// Close implements Ledger: it waits for a connection attempt in progress and closes the client.
func (v *Valkey) Close() error {
	v.rmu.Lock()
	v.releasesClosed = true
	v.rmu.Unlock()
	v.releases.Wait() // each is bounded by its attempts' timeouts
	v.cmu.Lock()
	v.closed = true
	ch := v.dialing
	v.cmu.Unlock()
	if ch != nil {
		<-ch
	}
	v.cmu.Lock()
	c := v.client
	v.client = nil
	v.cmu.Unlock()
	if c != nil {
		c.Close()
	}
	return nil
}

func (v *Valkey) startDialLocked() chan struct{} {
	if v.dialing != nil {
		return v.dialing
	}
	ch := make(chan struct{})
	v.dialing = ch
	opt := v.copt
	go func() {
		c, err := valkey.NewClient(opt)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), max(4*v.timeout, time.Second))
			if err = checkClusterMode(c, v.cluster); err == nil {
				err = checkEviction(ctx, c, v.allowEviction)
			}
			if err != nil {
				c.Close()
				c = nil
			}
			cancel()
		}
		v.cmu.Lock()
		if err == nil && v.closed {
			c.Close()
			c, err = nil, errors.New("valkey backend closed")
		}
		v.client, v.dialErr, v.dialing = c, err, nil
		v.cmu.Unlock()
		close(ch)
	}()
	return ch
}

// conn returns the client, connecting when there is none yet, within ctx.
func (v *Valkey) conn(ctx context.Context) (valkey.Client, error) {
	v.cmu.Lock()
	if v.client != nil {
		c := v.client
		v.cmu.Unlock()
		return c, nil
	}
	if v.closed {
		v.cmu.Unlock()
		return nil, errors.New("valkey backend closed")
	}
	ch := v.startDialLocked()
	v.cmu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return nil, fmt.Errorf("connect: %w", ctx.Err())
	}
	v.cmu.Lock()
	defer v.cmu.Unlock()
	if v.client != nil {
		return v.client, nil
	}
	if v.dialErr != nil {
		return nil, fmt.Errorf("connect: %w", v.dialErr)
	}
	return nil, errors.New("connect: no connection")
}

// fail turns a client error into an ErrStore error whose text holds no secret.
func (v *Valkey) fail(op string, err error) error {
	msg := err.Error()
	dirty := false
	for _, s := range v.secrets {
		if s != "" && strings.Contains(msg, s) {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
			dirty = true
		}
	}
	if dirty {
		err = errors.New(msg)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %v: %w", v.timeout, err)
	}
	return storeError("valkey "+op, err)
}

// scriptKeys is one call's keys and ARGV (see ledger/scripts/common.lua): the quota's common
// ARGV prefix (ttl, signature, widths, distinct windows), then the script's own arguments.
type scriptKeys struct {
	keys []string
	args []string
	*quotaLayout
}

// quotaLayout is what every script call of a quota shares whatever the key, computed once per
// *Quota (and again if its budgets or lease are changed in place).
type quotaLayout struct {
	budgets  []Budget // a copy, to notice a quota changed in place
	lease    time.Duration
	argv     []string // the common ARGV prefix; never modified
	suffixes []string // ":s<width_s>" per width, in ARGV order
	slotOf   []int    // budget index -> 1-based distinct-window slot
	ttlMs    int64
	checked  []checkedBudget
	leaseArg string
	// reserve's per-budget arguments (window slot, capacity) and inspect's (nbudgets, slots)
	reserveArgs, inspectArgs []string
}

// maxLayouts bounds the per-quota cache (a gateway has one quota per rule; a caller building a
// new *Quota per call only makes the cache start over).
const maxLayouts = 1024

// hashTag writes into tag the hash tag of rule's quota key key (see HashTag), without
// allocating for a rule and key of up to 128 bytes together.
func hashTag(tag *[32]byte, rule, key string) {
	var buf [128]byte
	sum := sha256.Sum256(append(append(append(buf[:0], rule...), 0), key...)) // compositeKey
	hex.Encode(tag[:], sum[:16])
}

func (v *Valkey) quotaLayout(q *Quota) *quotaLayout {
	if l, ok := v.layouts.Load(q); ok {
		ql := l.(*quotaLayout)
		if ql.lease == q.Lease && slices.Equal(ql.budgets, q.Budgets) {
			return ql
		}
	}
	ql := newQuotaLayout(q)
	if v.nlayouts.Add(1) > maxLayouts {
		v.layouts.Clear()
		v.nlayouts.Store(1)
	}
	v.layouts.Store(q, ql)
	return ql
}

func newQuotaLayout(q *Quota) *quotaLayout {
	bs := prepareBudgets(q)
	widths := distinctWidths(bs)
	ql := &quotaLayout{budgets: slices.Clone(q.Budgets), lease: q.Lease, checked: bs, ttlMs: storeTTLMs(q),
		slotOf: make([]int, len(bs)), leaseArg: strconv.FormatInt(q.Lease.Milliseconds(), 10)}
	args := []string{strconv.FormatInt(ql.ttlMs, 10), "", strconv.Itoa(len(widths))}
	for _, w := range widths {
		var maxWin int64
		for _, b := range bs {
			if b.widthMs == w {
				maxWin = max(maxWin, b.windowMs)
			}
		}
		ql.suffixes = append(ql.suffixes, ":s"+strconv.FormatInt(w/1000, 10))
		args = append(args, strconv.FormatInt(w, 10), strconv.FormatInt(maxWin, 10))
	}
	// Distinct windows, each with the slot of its width. The signature names the window list:
	// the running totals in the store are this quota's only when it matches.
	nwinAt := len(args)
	args = append(args, "")
	sig := []byte("v3")
	var wins []int64
	for bi, b := range bs {
		slot := 0
		for wi, w := range wins {
			if w == b.windowMs {
				slot = wi + 1
			}
		}
		if slot == 0 {
			wins = append(wins, b.windowMs)
			slot = len(wins)
			ws := 0
			for i, w := range widths {
				if w == b.widthMs {
					ws = i + 1
				}
			}
			win := strconv.FormatInt(b.windowMs, 10)
			args = append(args, win, strconv.Itoa(ws))
			sig = append(append(sig, ':'), win...)
		}
		ql.slotOf[bi] = slot
	}
	args[1] = string(sig)
	args[nwinAt] = strconv.Itoa(len(wins))
	ql.argv = args
	ql.inspectArgs = append(ql.inspectArgs, strconv.Itoa(len(bs)))
	for i, b := range bs {
		ql.reserveArgs = append(ql.reserveArgs, strconv.Itoa(ql.slotOf[i]), strconv.FormatInt(b.capacity, 10))
		ql.inspectArgs = append(ql.inspectArgs, strconv.Itoa(ql.slotOf[i]))
	}
	return ql
}

// layout returns a call's keys and its ARGV holding the common prefix, with room for extra
// more arguments. The keys, "<ns>:{<hash tag>}" and a suffix each, are cut from one string.
func (v *Valkey) layout(q *Quota, key string, extra int) scriptKeys {
	ql := v.quotaLayout(q)
	var tag [32]byte
	hashTag(&tag, q.Rule, key)
	nk := 2 + len(ql.suffixes)
	kv := make([]string, nk+len(ql.argv), nk+len(ql.argv)+extra) // the keys, then the ARGV (one allocation)
	sk := scriptKeys{quotaLayout: ql, keys: kv[:nk:nk], args: kv[nk:]}
	suffix := func(i int) string {
		switch i {
		case 0:
			return ":r" // reservations with their deadlines, and the bookkeeping fields
		case len(sk.keys) - 1:
			return ":x" // the tombstones' expiries (see common.lua)
		}
		return ql.suffixes[i-1]
	}
	p := len(v.ns) + len(":{") + len(tag) + len("}")
	n := len(sk.keys) * p
	for i := range sk.keys {
		n += len(suffix(i))
	}
	var b strings.Builder
	b.Grow(n)
	for i := range sk.keys {
		b.WriteString(v.ns)
		b.WriteString(":{")
		b.Write(tag[:])
		b.WriteByte('}')
		b.WriteString(suffix(i))
	}
	all, start := b.String(), 0
	for i := range sk.keys {
		end := start + p + len(suffix(i))
		sk.keys[i], start = all[start:end], end
	}
	copy(sk.args, ql.argv)
	return sk
}

// isTimeout reports whether err is a network timeout (a dial or read that ran out of time).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (v *Valkey) run(ctx context.Context, op string, s *valkey.Lua, keys, args []string) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	s, args = mutateScript(s, args)
	c, err := v.conn(ctx)
	if err != nil {
		return nil, v.fail(op, fmt.Errorf("%w: %w", errNotSent, err))
	}
	for attempt := 1; ; attempt++ {
		resp := s.Exec(ctx, c, keys, args)
		out, err := resp.AsIntSlice()
		if err == nil {
			return out, nil
		}
		// A connection that died under us (a Valkey restart leaves one broken connection per
		// pipe) fails the first call on it. Every script is idempotent by reservation id, so
		// one retry on a fresh connection is safe; a timeout is not retried — also a dial's own
		// timeout (the store timeout too) that ends a moment before ctx: the retry's dial would
		// not stop at ctx's deadline, and a cut-off cluster client answered in 2× the timeout.
		if nerr := resp.NonValkeyError(); attempt == 1 && nerr != nil && ctx.Err() == nil && !isTimeout(nerr) {
			continue
		}
		return nil, v.fail(op, err)
	}
}

// sweepLocalLocked forgets up to n expired keys and reservations (v.lmu held).
func (v *Valkey) sweepLocalLocked(nowMs int64, n int) {
	i := 0
	for k, e := range v.keys {
		if i >= n {
			break
		}
		i++
		if e.pending == 0 && e.expiryMs <= nowMs {
			delete(v.keys, k)
		}
	}
	i = 0
	for id, dl := range v.ids {
		if i >= n {
			break
		}
		i++
		if dl <= nowMs {
			delete(v.ids, id)
		}
	}
}

// Reserve implements Ledger.
func (v *Valkey) Reserve(ctx context.Context, q *Quota, key string, estimate int64) (Decision, error) {
	if d := validateReserve(v.limits, q, key, estimate); d != nil {
		return Decision{Denial: d}, nil
	}
	ck := compositeKey(q.Rule, key)
	localNow := time.Now().UnixMilli()

	// Per-instance bounds, decided locally before the store call.
	v.lmu.Lock()
	v.sweepLocalLocked(localNow, 2)
	e := v.keys[ck]
	if e == nil && len(v.keys) >= v.limits.MaxKeys {
		v.sweepLocalLocked(localNow, 64)
		if len(v.keys) >= v.limits.MaxKeys {
			v.lmu.Unlock()
			return Decision{Denial: &Denial{Reason: ReasonKeyCapacity, RetryAfter: capacityRetryAfter}}, nil
		}
	}
	if len(v.ids)+v.pendingRes >= v.limits.MaxActiveReservations {
		v.sweepLocalLocked(localNow, 64)
		if len(v.ids)+v.pendingRes >= v.limits.MaxActiveReservations {
			v.lmu.Unlock()
			return Decision{Denial: &Denial{Reason: ReasonReservationCapacity, RetryAfter: capacityRetryAfter}}, nil
		}
	}
	if e == nil {
		e = &trackedKey{}
		v.keys[ck] = e
	}
	e.pending++
	v.pendingRes++
	v.lmu.Unlock()

	sk := v.layout(q, key, 4+2*len(q.Budgets))
	id := newReservationID()
	sk.args = append(sk.args, strconv.FormatInt(estimate, 10), sk.leaseArg, id, sk.inspectArgs[0])
	sk.args = append(sk.args, sk.reserveArgs...)
	out, err := v.exec(ctx, "reserve", reserveScript, sk.keys, sk.args, true, firstIsOne)
	tombstoned := err == nil && len(out) == 1 && out[0] == -1
	if tombstoned {
		err = storeError("valkey reserve", errTombstoned)
	} else if err == nil && len(out) != 3+2*len(q.Budgets) {
		err = v.fail("reserve", fmt.Errorf("unexpected reply of %d values", len(out)))
	}

	v.lmu.Lock()
	e.pending--
	v.pendingRes--
	admitted := err == nil && out[0] == 1
	if admitted {
		v.ids[id] = localNow + q.Lease.Milliseconds()
		e.expiryMs = max(e.expiryMs, localNow+sk.ttlMs)
	}
	if e.pending == 0 && e.expiryMs <= localNow && v.keys[ck] == e {
		delete(v.keys, ck)
	}
	v.lmu.Unlock()
	if err != nil {
		if !tombstoned {
			v.releaseAmbiguous(Reservation{ID: id, Key: key, Quota: q, Estimate: estimate}, err)
		}
		return Decision{}, err
	}

	d := Decision{Admitted: admitted, Windows: make([]WindowState, len(q.Budgets))}
	for i, b := range q.Budgets {
		d.Windows[i] = WindowState{
			Window:    b.Window,
			Limit:     b.Capacity,
			Remaining: out[3+2*i],
			Reset:     time.Duration(out[4+2*i]) * time.Millisecond,
		}
	}
	if admitted {
		d.Reservation = Reservation{ID: id, Key: key, Quota: q, Estimate: estimate}
		return d, nil
	}
	i := int(out[1]) - 1
	if i < 0 || i >= len(q.Budgets) {
		return Decision{}, v.fail("reserve", fmt.Errorf("unexpected refusing window %d", out[1]))
	}
	d.Denial = &Denial{
		Reason:     ReasonWindowCapacity,
		Window:     q.Budgets[i].Window,
		Limit:      q.Budgets[i].Capacity,
		Remaining:  d.Windows[i].Remaining,
		RetryAfter: time.Duration(out[2]) * time.Millisecond,
	}
	return d, nil
}

// touchLocal records that the store holds live state for a key this instance tracks.
func (v *Valkey) touchLocal(ck string, expiryMs int64) {
	if e := v.keys[ck]; e != nil {
		e.expiryMs = max(e.expiryMs, expiryMs)
	}
}

// Renew implements Ledger.
func (v *Valkey) Renew(ctx context.Context, r Reservation) (bool, error) {
	if r.Quota == nil || r.ID == "" || len(r.Quota.Budgets) == 0 {
		return false, nil
	}
	localNow := time.Now().UnixMilli()
	sk := v.layout(r.Quota, r.Key, 2)
	sk.args = append(sk.args, r.ID, sk.leaseArg)
	out, err := v.exec(ctx, "renew", renewScript, sk.keys, sk.args, true, firstIsOne)
	if err != nil {
		return false, err
	}
	live := len(out) > 0 && out[0] == 1
	v.lmu.Lock()
	if live {
		if _, ok := v.ids[r.ID]; ok {
			v.ids[r.ID] = localNow + r.Quota.Lease.Milliseconds()
		}
		v.touchLocal(compositeKey(r.Quota.Rule, r.Key), localNow+sk.ttlMs)
	} else {
		delete(v.ids, r.ID)
	}
	v.lmu.Unlock()
	return live, nil
}

// Settle implements Ledger. In acknowledged mode a settlement whose acknowledgement falls
// short is returned as applied together with an error wrapping ErrNotAcknowledged; the caller
// must not retry it (see valkey_ack.go).
func (v *Valkey) Settle(ctx context.Context, r Reservation, usage Usage) (Settlement, error) {
	return v.settle(ctx, r, usage, true)
}

// settle charges usage; ack false skips the acknowledgement (the release of an ambiguous
// reserve: if it is lost in a failover, the lease charges the estimate — conservative).
func (v *Valkey) settle(ctx context.Context, r Reservation, usage Usage, ack bool) (Settlement, error) {
	if r.Quota == nil || r.ID == "" || len(r.Quota.Budgets) == 0 {
		return Settlement{}, nil
	}
	localNow := time.Now().UnixMilli()
	sk := v.layout(r.Quota, r.Key, 3)
	known, tokens := "0", "0"
	if usage.Known {
		known, tokens = "1", strconv.FormatInt(min(max(0, usage.Tokens), MaxEstimate), 10)
	}
	sk.args = append(sk.args, r.ID, known, tokens)
	out, err := v.exec(ctx, "settle", settleScript, sk.keys, sk.args, ack, firstIsOne)
	var ackErr error
	if err != nil && out != nil && errors.Is(err, ErrNotAcknowledged) {
		ackErr, err = err, nil // applied on the primary, not confirmed by replicas
	}
	if err != nil {
		return Settlement{}, err
	}
	v.lmu.Lock()
	delete(v.ids, r.ID)
	if len(out) > 0 && out[0] == 1 {
		v.touchLocal(compositeKey(r.Quota.Rule, r.Key), localNow+sk.ttlMs)
	}
	v.lmu.Unlock()
	if len(out) == 0 || out[0] != 1 {
		return Settlement{}, nil
	}
	if len(out) == 4 {
		// a reservation whose lease ran out (charged its estimate then): only the overage
		return Settlement{Applied: true, Charged: out[1], Overage: out[1]}, ackErr
	}
	if len(out) != 3 {
		return Settlement{}, v.fail("settle", fmt.Errorf("unexpected reply of %d values", len(out)))
	}
	charged, est := out[1], out[2]
	return Settlement{Applied: true, Charged: charged, Refund: max(0, est-charged), Overage: max(0, charged-est)}, ackErr
}

// Inspect implements Ledger.
func (v *Valkey) Inspect(ctx context.Context, q *Quota, key string) (KeyState, error) {
	if q == nil || len(q.Budgets) == 0 {
		return KeyState{}, nil
	}
	sk := v.layout(q, key, 1+len(q.Budgets))
	sk.args = append(sk.args, sk.inspectArgs...)
	out, err := v.run(ctx, "inspect", inspectScript, sk.keys, sk.args)
	if err != nil {
		return KeyState{}, err
	}
	if len(out) != 2+len(q.Budgets) {
		return KeyState{}, v.fail("inspect", fmt.Errorf("unexpected reply of %d values", len(out)))
	}
	st := KeyState{ActiveReservations: int(out[0]), ReservedTokens: out[1], Windows: make([]WindowUsage, len(q.Budgets))}
	for i, b := range q.Budgets {
		st.Windows[i] = WindowUsage{Window: b.Window, Capacity: b.Capacity, Settled: out[2+i]}
	}
	return st, nil
}

var _ Ledger = (*Valkey)(nil)
