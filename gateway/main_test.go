package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/wire"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binPath is the quotaqual binary built once for the whole test process. The end-to-end tests
// and benchmarks run it as real gateway and provider processes, so what is tested is what
// ships.
var (
	binPath  string
	binErr   error
	binDir   string
	binOnce  sync.Once
	testHTTP = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Fuzzing workers and fuzz coordinators do not need the binary.
	fuzzing := false
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		fuzzing = true
	}
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		fuzzing = true
	}
	if !fuzzing {
		buildBinary()
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func buildBinary() {
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "quotaqual-gateway-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "quotaqual")
		binErr = testbin.Build(binPath)
	})
}

// needBinary fails the test when the binary could not be built.
func needBinary(t testing.TB) string {
	t.Helper()
	buildBinary()
	if binErr != nil {
		t.Fatalf("%v", binErr)
	}
	return binPath
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// proc is one quotaqual process started by a test, its stderr captured to a file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	exitErr error
}

func startProc(t testing.TB, name string, env []string, args ...string) *proc {
	t.Helper()
	bin := needBinary(t)
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("--- %s log (tail) ---\n%s", name, b)
		}
	})
	return p
}

func (p *proc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// waitExit waits for the process to exit, at most d.
func (p *proc) waitExit(d time.Duration) (exited bool, code int) {
	select {
	case <-p.done:
		return true, p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		return false, -1
	}
}

// waitReady polls url until it answers 200, failing the test after d.
func waitReady(t testing.TB, url string, d time.Duration, p *proc) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		resp, err := testHTTP.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if p != nil {
			select {
			case <-p.done:
				t.Fatalf("%s exited before it was ready: %v\n%s", p.name, p.exitErr, p.log())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready within %s (last error %v)", url, d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventually polls f every 20 ms until it returns "" (success) or d passes; then it fails the
// test with f's last message.
func eventually(t testing.TB, d time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// providerProc is a running provider stub.
type providerProc struct {
	*proc
	site, data, admin string
}

func startProvider(t testing.TB, site string, extra ...string) *providerProc {
	t.Helper()
	data, admin := freeAddrPair(t)
	args := append([]string{"provider", "--site", site, "--listen", data, "--admin-listen", admin}, extra...)
	p := startProc(t, "provider-"+site, nil, args...)
	waitReady(t, "http://"+admin+"/readyz", 10*time.Second, p)
	return &providerProc{proc: p, site: site, data: data, admin: admin}
}

type callLog struct {
	Site     string `json:"site"`
	Calls    int64  `json:"calls"`
	InFlight int64  `json:"in_flight"`
	Requests []struct {
		RequestID            string `json:"request_id"`
		PromptTokens         int64  `json:"prompt_tokens"`
		CompletionTokens     int64  `json:"completion_tokens"`
		GeneratedTokens      int64  `json:"generated_tokens"`
		AuthorizationPresent bool   `json:"authorization_present"`
		Status               int    `json:"status"`
		ClientGone           bool   `json:"client_gone"`
	} `json:"requests"`
}

func (p *providerProc) calls(t testing.TB) callLog {
	t.Helper()
	var cl callLog
	getJSON(t, "http://"+p.admin+"/admin/calls", &cl)
	return cl
}

func getJSON(t testing.TB, url string, v any) int {
	t.Helper()
	resp, err := testHTTP.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if v != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// gatewayProc is a running gateway.
type gatewayProc struct {
	*proc
	data, admin string
}

func (g *gatewayProc) url() string { return "http://" + g.data + "/v1/chat/completions" }

func startGateway(t testing.TB, name, cfgTemplate string, env []string) *gatewayProc {
	t.Helper()
	data, admin := freeAddrPair(t)
	cfg := strings.NewReplacer("{{listen}}", data, "{{admin}}", admin).Replace(cfgTemplate)
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, name, env, "gateway", "--config", path)
	waitReady(t, "http://"+admin+"/readyz", 15*time.Second, p)
	return &gatewayProc{proc: p, data: data, admin: admin}
}

func (g *gatewayProc) quota(t testing.TB, rule, subject string) wire.QuotaState {
	t.Helper()
	var qs wire.QuotaState
	if code := getJSON(t, fmt.Sprintf("http://%s/admin/quota?rule=%s&subject=%s", g.admin, rule, subject), &qs); code != 200 {
		t.Fatalf("/admin/quota: status %d", code)
	}
	return qs
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

type chatOpts struct {
	auth    string
	body    string
	headers map[string]string
	ctx     context.Context
}

type chatResult struct {
	status  int
	header  http.Header
	body    []byte
	latency time.Duration
	err     error
}

func chat(url string, o chatOpts) chatResult {
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	body := o.body
	if body == "" {
		body = `{"model":"qwen3-0.6b","max_tokens":2,"messages":[{"role":"user","content":"hello"}]}`
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if o.auth != "" {
		req.Header.Set("Authorization", o.auth)
	}
	for k, v := range o.headers {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := testHTTP.Do(req)
	if err != nil {
		return chatResult{err: err, latency: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return chatResult{status: resp.StatusCode, header: resp.Header, body: b, latency: time.Since(start), err: err}
}

// sseEvents reads an SSE body and returns each data payload with its arrival time.
func sseEvents(r io.Reader) (data []string, at []time.Time, err error) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimRight(line, "\r\n")
			if v, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				data = append(data, string(v))
				at = append(at, time.Now())
			}
		}
		if err == io.EOF {
			return data, at, nil
		}
		if err != nil {
			return data, at, err
		}
	}
}

type apiErrBody struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

func decodeErr(t testing.TB, b []byte) apiErrBody {
	t.Helper()
	var e apiErrBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body is not OpenAI-style JSON: %v: %s", err, b)
	}
	return e
}

// freeAddrPair returns two distinct loopback addresses whose ports were free a moment ago:
// both listeners stay open until both ports are chosen, so the kernel cannot hand the same
// port out twice (two freeAddr calls in a row can).
func freeAddrPair(t testing.TB) (string, string) {
	t.Helper()
	a, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	return a.Addr().String(), b.Addr().String()
}
