// Package e2e holds the helpers the engines' test packages (enginetest, docker and kind) share: one
// walkthrough chat request through a topology, polling with a deadline, a docker image check,
// and a writer that sends topology progress to the test log.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

// Chat sends one walkthrough request of subject through a gateway with topo.Client() and
// returns the status (0 without a response) and the provider site header. A transport error
// goes to report: t.Errorf where it must fail the test, t.Logf where a caller polls through
// expected failures.
func Chat(t *testing.T, topo topology.Topology, gateway string, d *deployment.Deployment, subject string,
	timeout time.Duration, report func(format string, args ...any)) (int, string) {
	t.Helper()
	if _, ok := d.Credential("", subject); !ok {
		t.Fatalf("no walkthrough credential for %s", subject)
	}
	status, site, err := Send(topo, gateway, d, subject, timeout)
	if err != nil {
		report("chat via %s: %v", gateway, err)
	}
	return status, site
}

// Send is Chat that returns a transport failure (or a subject with no walkthrough credential)
// as an error, for a caller that expects silence: a paused gateway answers nothing.
func Send(topo topology.Topology, gateway string, d *deployment.Deployment, subject string, timeout time.Duration) (status int, site string, err error) {
	cred, ok := d.Credential("", subject)
	if !ok {
		return 0, "", fmt.Errorf("no walkthrough credential for %s", subject)
	}
	body := `{"model":"` + providerstub.DefaultModel + `","max_tokens":8,"messages":[{"role":"user","content":"hello"}]}`
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, topo.Gateway(gateway).DataURL+"/v1/chat/completions", strings.NewReader(body))
	req.SetBasicAuth(cred.Username, cred.Password)
	req.Header.Set("Content-Type", "application/json")
	resp, err := topo.Client().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(wire.SiteHeader), nil
}

// Eventually calls f every interval until want(f()) or within has passed, then fails the test
// with the last status.
func Eventually(t *testing.T, what string, within, interval time.Duration, f func() int, want func(int) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := 0
	for time.Now().Before(deadline) {
		if last = f(); want(last) {
			return
		}
		time.Sleep(interval)
	}
	t.Errorf("%s: last status %d after %s", what, last, within)
}

// ImageExists reports whether the local Docker engine has ref.
func ImageExists(ref string) bool {
	return exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", ref).Run() == nil
}

// LogWriter sends each write (topology progress lines) to the test log.
type LogWriter struct{ T *testing.T }

func (w LogWriter) Write(p []byte) (int, error) {
	w.T.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
