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

	"github.com/quotaqual/quotaqual/fixtures"
	"github.com/quotaqual/quotaqual/topology"
)

func init() { subcommands = append(subcommands, newUpCmd) }

// upForwards are the loopback port forwards `up` offers on the netns topology, in the order
// the outer process passes their listeners into the namespace.
var upForwards = []struct {
	gateway string
	admin   bool
}{
	{topology.HostGatewayA, false}, {topology.HostGatewayB, false},
	{topology.HostGatewayA, true}, {topology.HostGatewayB, true},
}

func newUpCmd() *cobra.Command {
	var engine, profile, runID, denyMode string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring the topology up for a walkthrough; Ctrl-C tears it down",
		Long: `up brings up the qualification topology (two gateways, three provider stubs, Valkey) with
fresh credentials and keeps it running until Ctrl-C or SIGTERM, then tears everything down.

It prints the gateway URLs and ready-to-paste curl commands with this run's walkthrough
credentials — on the terminal only: when standard output is not a terminal the passwords are
replaced by the environment variables' names.

On the netns topology the gateways live in private network namespaces that the rest of the
machine cannot reach. up therefore listens on free 127.0.0.1 ports and forwards each
connection: data ports from inside the client namespace (so the network policy applies as in
a run), admin ports (/metrics, /readyz, /admin/quota) from the observer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			prof, err := fixtures.ProfileByName(profile)
			if err != nil {
				return withCode(ExitUsage, err)
			}
			if runID == "" {
				runID = topology.InsideRunID()
			}
			if runID == "" {
				runID = topology.NewRunID()
			}
			if err := topology.ValidateRunID(runID); err != nil {
				return withCode(ExitUsage, err)
			}
			if denyMode != topology.DenyReject && denyMode != topology.DenyDrop {
				return withCode(ExitUsage, fmt.Errorf("--deny-mode %q is unknown: use reject or drop", denyMode))
			}
			errw := cmd.ErrOrStderr()
			switch {
			case topology.Inside():
				engine = topology.EngineNetns
			case engine == topology.EngineAuto:
				var reason string
				engine, reason = topology.DetectAuto()
				fmt.Fprintf(errw, "topology %s: %s\n", engine, reason)
			case engine != topology.EngineNetns && engine != topology.EngineDocker && engine != topology.EngineProcess:
				return withCode(ExitUsage, fmt.Errorf("--topology %q is unknown: use auto, netns, docker or process", engine))
			}
			if engine == topology.EngineNetns && !topology.Inside() {
				return upReexec(runID)
			}
			return upServe(cmd, engine, prof, runID, denyMode)
		},
	}
	cmd.Flags().StringVar(&engine, "topology", topology.EngineAuto, "auto, netns, docker or process")
	cmd.Flags().StringVar(&profile, "profile", fixtures.DefaultProfile, "quick or reference")
	cmd.Flags().StringVar(&runID, "run-id", "", "run id (1-24 of a-z, 0-9, '-'); default: generated")
	cmd.Flags().StringVar(&denyMode, "deny-mode", topology.DenyReject, "how the network policy denies: reject (fast reset) or drop (timeout, as most CNIs)")
	return cmd
}

// upReexec opens the loopback listeners of the port forwards here, outside, where the user's
// shell can reach them, and runs `up` again inside the run's namespaces with them.
func upReexec(runID string) error {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for range upForwards {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return withCode(ExitTopology, fmt.Errorf("opening a loopback port forward: %w", err))
		}
		f, err := l.(*net.TCPListener).File()
		l.Close() // the duplicate in f stays open
		if err != nil {
			return withCode(ExitTopology, err)
		}
		files = append(files, f)
	}
	_, code, err := topology.ReexecIntoNamespace(runID, files)
	if err != nil {
		return withCode(ExitTopology, err)
	}
	if code != 0 {
		return withCode(code, nil)
	}
	return nil
}

func upServe(cmd *cobra.Command, engine string, prof fixtures.Profile, runID, denyMode string) error {
	out, errw := cmd.OutOrStdout(), cmd.ErrOrStderr()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	self, err := os.Executable()
	if err != nil {
		return withCode(ExitTopology, fmt.Errorf("finding the quotaqual binary: %w", err))
	}
	wd, err := topology.NewWorkDir("quotaqual-up-", runID)
	if err != nil {
		return withCode(ExitTopology, err)
	}
	defer wd.Remove()
	work := wd.Path
	d, err := fixtures.NewDeployment(runID, prof, nil)
	if err != nil {
		return withCode(ExitUsage, err)
	}
	topo, err := topology.New(engine, topology.Spec{
		RunID: runID, WorkDir: work, Binary: self, Deployment: d, DenyMode: denyMode, Stdout: errw,
	})
	if err != nil {
		return withCode(ExitTopology, err)
	}
	start := time.Now()
	if err := topo.Up(ctx); err != nil {
		return withCode(ExitTopology, fmt.Errorf("bringing the %s topology up: %w", engine, err))
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
	for _, g := range topology.Gateways {
		data[g], admin[g] = topo.Gateway(g).DataURL, topo.Gateway(g).AdminURL
	}
	var fwdWG sync.WaitGroup
	if engine == topology.EngineNetns {
		ls, err := topology.InheritedListeners()
		if err != nil {
			return withCode(ExitTopology, err)
		}
		if len(ls) != len(upForwards) {
			return withCode(ExitTopology, fmt.Errorf("expected %d port-forward listeners from the outer process, got %d", len(upForwards), len(ls)))
		}
		clientDial := topo.Client().Transport.(*http.Transport).DialContext
		observerDial := topo.Observer().Transport.(*http.Transport).DialContext
		for i, f := range upForwards {
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
	fmt.Fprintf(out, "\nquotaqual up — run %s, %s topology, profile %s\n\n", runID, engine, prof.Name)
	for _, g := range topology.Gateways {
		fmt.Fprintf(out, "  %-10s data  %s\n  %-10s admin %s  (/readyz /metrics /admin/quota)\n", g, data[g], "", admin[g])
	}
	if engine == topology.EngineNetns {
		fmt.Fprintln(out, "\n  (loopback forwards into the run's namespaces: data from the client host, admin from the observer)")
	}
	fmt.Fprintln(out, "\nTry (each subject has its own budget, shared by both gateways):")
	body := `{"model":"` + fixtures.DefaultModel + `","max_tokens":8,"messages":[{"role":"user","content":"hello"}]}`
	for i, label := range fixtures.Subjects {
		c, ok := d.Credential("", label)
		if !ok {
			continue
		}
		pw := c.Password
		if !tty {
			pw = "$" + c.EnvVar // never write a password into a file or a pipe
		}
		g := topology.Gateways[i%len(topology.Gateways)]
		fmt.Fprintf(out, "  curl -sS -i -u \"%s:%s\" -H 'Content-Type: application/json' \\\n    -d '%s' %s/v1/chat/completions\n",
			c.Username, pw, body, data[g])
	}
	if !tty {
		fmt.Fprintln(out, "\n  (standard output is not a terminal: passwords are shown as variable names only)")
	}
	fmt.Fprintln(out, "\nCtrl-C tears everything down.")

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
