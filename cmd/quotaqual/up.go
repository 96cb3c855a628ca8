package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/qualify"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/walkthrough"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newUpCmd, newDemoCmd) }

// upForward is one loopback port forward `up` offers on the netns topology.
type upForward struct {
	gateway string
	admin   bool
}

// upForwards are the forwards of a run with n gateways (every data port, then every admin
// port), in the order the outer process passes their listeners into the namespace.
func upForwards(n int) []upForward {
	var fs []upForward
	for _, admin := range []bool{false, true} {
		for _, g := range topology.GatewayNames(n) {
			fs = append(fs, upForward{g, admin})
		}
	}
	return fs
}

func newUpCmd() *cobra.Command { return upCommand(false) }

// newDemoCmd is `up --demo` under its own name.
func newDemoCmd() *cobra.Command { return upCommand(true) }

func upCommand(demoCmd bool) *cobra.Command {
	var engine, profile, runID, denyMode, store string
	var gateways int
	demo := demoCmd
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring the topology up for a walkthrough; Ctrl-C tears it down",
		Long: `up brings up the qualification topology (two gateways, three provider stubs, Valkey) with
fresh credentials and keeps it running until Ctrl-C or SIGTERM, then tears everything down.

It prints the gateway URLs and ready-to-paste curl commands with this run's walkthrough
credentials, then a live view: each subject's remaining tokens per window as a bar, each
gateway's admitted / denied / 503 counters and store state, and events as they happen. When
standard output is not a terminal the passwords are not printed: they go to a 0600 env file
whose path is printed (source it, then the curl lines work), and the live view is plain lines,
one per event.

With --demo (or as quotaqual demo) it instead walks through the story in about a minute —
requests admitted on both gateways, the shared budget running out, a 429 with its headers,
Valkey stopped and the 503s, recovery — showing each command it runs, then tears down.

On the netns topology the gateways live in private network namespaces that the rest of the
machine cannot reach. up therefore listens on free 127.0.0.1 ports and forwards each
connection: data ports from inside the client namespace (so the network policy applies as in
a run), admin ports (/metrics, /readyz, /admin/quota) from the observer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			survivePipeLoss()
			plan, err := qualify.Prepare(qualify.Options{Topology: engine, Profile: profile, RunID: runID,
				DenyMode: denyMode, Gateways: gateways, Store: store})
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			if plan.Engine == topology.EngineKind { // up serves no kind topology
				return withCode(wire.ExitUsage, fmt.Errorf("--topology %s: up serves no kind topology: use %s", plan.Engine, topology.EngineChoices(topology.EngineKind)))
			}
			if !plan.Entered && plan.EngineWhy != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "topology %s: %s\n", plan.Engine, plan.EngineWhy)
			}
			if plan.NeedsEntering() {
				return upReexec(plan)
			}
			if _, _, err := plan.Enter(nil); err != nil {
				return withCode(wire.ExitTopology, err)
			}
			return upServe(cmd, plan, demo)
		},
	}
	if demoCmd {
		cmd.Use, cmd.Short = "demo", "A narrated one-minute walkthrough on a fresh topology (up --demo)"
	} else {
		cmd.Flags().BoolVar(&demo, "demo", false, "run the narrated walkthrough, then tear down")
	}
	cmd.Flags().StringVar(&engine, "topology", topology.EngineAuto, topologyUsage(topology.EngineKind))
	cmd.Flags().StringVar(&profile, "profile", deployment.DefaultProfile, "quick or reference")
	cmd.Flags().StringVar(&runID, "run-id", "", "run id (1-24 of a-z, 0-9, '-'); default: generated")
	cmd.Flags().IntVar(&gateways, "gateways", topology.DefaultGateways, gatewaysUsage)
	cmd.Flags().StringVar(&store, "store", topology.StoreSingle, "the store the gateways share: single (one Valkey) or cluster (a Valkey Cluster of three primaries, on the engines that run one)")
	cmd.Flags().StringVar(&denyMode, "deny-mode", topology.DenyReject, "how the network policy denies: reject (fast reset) or drop (timeout, as most CNIs)")
	return cmd
}

// upReexec opens the loopback listeners of the port forwards here, outside, where the user's
// shell can reach them, and runs `up` again where the plan's engine builds its topology (netns:
// inside the run's namespaces) with them.
func upReexec(plan *qualify.Plan) error {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for range upForwards(plan.Gateways) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return withCode(wire.ExitTopology, fmt.Errorf("opening a loopback port forward: %w", err))
		}
		f, err := l.(*net.TCPListener).File()
		l.Close() // the duplicate in f stays open
		if err != nil {
			return withCode(wire.ExitTopology, err)
		}
		files = append(files, f)
	}
	_, code, err := plan.Enter(files)
	// However the inner process ended (kill -9 included), what it left outside its namespaces
	// — its credentials file, its work directory's mount point — goes now.
	removed, errs := topology.RemoveDeadWorkDirs(plan.RunID)
	reportRemoved(os.Stderr, removed, errs)
	if err != nil {
		return withCode(wire.ExitTopology, err)
	}
	if code != 0 {
		return withCode(code, nil)
	}
	return nil
}

func upServe(cmd *cobra.Command, plan *qualify.Plan, demo bool) error {
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	engine, prof, runID := plan.Engine, plan.Params(), plan.RunID
	// Signals stay caught until up returns, so a second Ctrl-C or a hang-up during teardown
	// cannot cut it short; endDemo ends the walkthrough without letting them through.
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ctx, endDemo := context.WithCancel(sigCtx)
	defer endDemo()

	self, err := os.Executable()
	if err != nil {
		return withCode(wire.ExitTopology, fmt.Errorf("finding the quotaqual binary: %w", err))
	}
	wd, err := topology.NewWorkDir("quotaqual-up-", runID)
	if err != nil {
		return withCode(wire.ExitTopology, err)
	}
	defer wd.Remove()
	work := wd.Path
	d, err := deployment.NewDeployment(runID, prof, nil)
	if err != nil {
		return withCode(wire.ExitUsage, err)
	}
	spec := plan.Spec(work, self, d)
	spec.Stdout = errw
	topo, err := topology.New(engine, spec)
	if err != nil {
		return withCode(wire.ExitTopology, err)
	}
	start := time.Now()
	if err := topo.Up(ctx); err != nil {
		return withCode(wire.ExitTopology, fmt.Errorf("bringing the %s topology up: %w", engine, err))
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		td, err := topo.Down(dctx)
		fmt.Fprintf(errw, "torn down in %s: %s\n", td.Elapsed, strings.Join(td.Removed, ", "))
		if err != nil {
			fmt.Fprintln(errw, "teardown:", err)
		}
	}()
	fmt.Fprintf(errw, "run %s: %s topology up in %s\n", runID, engine, time.Since(start).Round(time.Millisecond))

	// Where the user reaches each gateway from this machine.
	data := map[string]string{}
	admin := map[string]string{}
	for _, g := range topo.Gateways() {
		data[g], admin[g] = topo.Gateway(g).DataURL, topo.Gateway(g).AdminURL
	}
	var fwdWG sync.WaitGroup
	if engine == topology.EngineNetns {
		ls, err := topology.InheritedListeners()
		if err != nil {
			return withCode(wire.ExitTopology, err)
		}
		fwds := upForwards(len(topo.Gateways()))
		if len(ls) != len(fwds) {
			return withCode(wire.ExitTopology, fmt.Errorf("expected %d port-forward listeners from the outer process, got %d", len(fwds), len(ls)))
		}
		clientDial := topo.Client().Transport.(*http.Transport).DialContext
		observerDial := topo.Observer().Transport.(*http.Transport).DialContext
		for i, f := range fwds {
			target, dial, m := data[f.gateway], clientDial, data
			if f.admin {
				target, dial, m = admin[f.gateway], observerDial, admin
			}
			u, _ := url.Parse(target)
			m[f.gateway] = "http://" + ls[i].Addr().String()
			fwdWG.Add(1)
			go func() {
				defer fwdWG.Done()
				forward(ctx, ls[i], u.Host, dial)
			}()
		}
	}

	tty := false
	if f, ok := out.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd())
	}
	var subjects []walkthrough.Subject
	for _, label := range deployment.Subjects {
		if c, ok := d.Credential("", label); ok {
			subjects = append(subjects, walkthrough.Subject{Label: label, Username: c.Username, Password: c.Password, EnvVar: c.EnvVar})
		}
	}
	envFile := ""
	if !tty {
		// Never write a password into a pipe or a log: the curl lines read it from the
		// environment, and this file (readable by its owner only, in memory-backed storage
		// where the machine has it) sets it.
		cf, err := topology.NewCredentialsFile(runID, credentialsExports(runID, subjects))
		if err != nil {
			return withCode(wire.ExitTopology, err)
		}
		defer cf.Remove()
		envFile = cf.Path
	}
	var header strings.Builder
	fmt.Fprintf(&header, "quotaqual up — run %s, %s topology, profile %s\n\n", runID, engine, prof.Name)
	for _, g := range topo.Gateways() {
		fmt.Fprintf(&header, "  %-10s data  %s\n  %-10s admin %s  (/readyz /metrics /admin/quota)\n", g, data[g], "", admin[g])
	}
	if engine == topology.EngineNetns {
		fmt.Fprintln(&header, "\n  (loopback forwards into the run's namespaces: data from the client host, admin from the observer)")
	}
	fmt.Fprintln(&header, "\nTry (each subject has its own budget, shared by every gateway):")
	for i, sub := range subjects {
		pw := sub.Password
		if !tty {
			pw = "$" + sub.EnvVar
		}
		g := topo.Gateways()[i%len(topo.Gateways())]
		fmt.Fprintf(&header, "  curl -sS -i -u \"%s:%s\" -H 'Content-Type: application/json' \\\n    -d '%s' %s/v1/chat/completions\n",
			sub.Username, pw, walkthrough.ChatBody(providerstub.DefaultModel), data[g])
	}
	if !tty {
		fmt.Fprintf(&header, "\n  credentials: %s (mode 0600, removed at teardown); load them first: . %s\n", envFile, envFile)
	}
	fmt.Fprintln(&header, "\nCtrl-C tears everything down.")
	fmt.Fprint(out, "\n", header.String())

	target := walkthrough.Target{
		Gateways: topo.Gateways(),
		AdminURL: map[string]string{}, DataURL: map[string]string{},
		Observer: topo.Observer(), Client: topo.Client(),
		Rule: scenarios.RuleName, Subjects: subjects,
	}
	for _, g := range topo.Gateways() {
		target.AdminURL[g], target.DataURL[g] = topo.Gateway(g).AdminURL, topo.Gateway(g).DataURL
	}
	if demo {
		pace := time.Duration(0)
		if tty {
			pace = 2 * time.Second
		}
		dm := &walkthrough.Demo{Out: out, Target: target, Levers: topo, Model: providerstub.DefaultModel, Pace: pace}
		err := dm.Run(ctx)
		endDemo() // tear down now: the demo is over
		fwdWG.Wait()
		if err != nil {
			return withCode(wire.ExitFailed, err)
		}
		return nil
	}
	walkthrough.Live(ctx, walkthrough.NewView(out, tty, "\n"+header.String()+"\n"), target, time.Second)

	<-ctx.Done()
	fmt.Fprintln(errw, "\ntearing down ...")
	fwdWG.Wait()
	return nil
}

// forward accepts on l until ctx ends and pipes each connection to target, dialled with dial.
func forward(ctx context.Context, l net.Listener, target string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		go func() {
			defer c.Close()
			dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			up, err := dial(dctx, "tcp", target)
			cancel()
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
			go func() { io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
			select {
			case <-done:
				<-done
			case <-ctx.Done():
			}
		}()
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// credentialsExports renders the walkthrough passwords as the shell exports of the credentials
// file.
func credentialsExports(runID string, subjects []walkthrough.Subject) []byte {
	var b strings.Builder
	b.WriteString("# quotaqual up walkthrough credentials for run " + runID + "; removed at teardown\n")
	for _, s := range subjects {
		fmt.Fprintf(&b, "export %s='%s'\n", s.EnvVar, s.Password)
	}
	return []byte(b.String())
}
