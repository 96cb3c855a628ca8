package kindengine

// Component logs: each pod's, saved before a pod goes away and collected at the end.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// podLog returns a pod's log (and its previous container's, when it restarted).
func (t *kindTopo) podLog(ctx context.Context, p *corev1.Pod) []byte {
	var out bytes.Buffer
	restarted := false
	for _, cs := range p.Status.ContainerStatuses {
		restarted = restarted || cs.RestartCount > 0
	}
	get := func(previous bool) {
		b, err := t.cs.CoreV1().Pods(t.ns).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
		if err == nil {
			fmt.Fprintf(&out, "=== pod %s%s ===\n", p.Name, map[bool]string{true: " (previous container)"}[previous])
			out.Write(b)
		}
	}
	if restarted {
		get(true)
	}
	get(false)
	return out.Bytes()
}

// saveLogs keeps the logs of host's current pods, which a restart or scale-down removes.
func (t *kindTopo) saveLogs(ctx context.Context, host string) {
	pods, err := t.pods(ctx, host)
	if err != nil {
		return
	}
	for i := range pods {
		b := t.podLog(ctx, &pods[i])
		t.mu.Lock()
		if !t.saved[pods[i].Name] {
			t.saved[pods[i].Name] = true
			if t.logs[host] == nil {
				t.logs[host] = &bytes.Buffer{}
			}
			t.logs[host].Write(b)
		}
		t.mu.Unlock()
	}
}

// logsNow returns host's saved logs followed by its live pods' logs.
func (t *kindTopo) logsNow(ctx context.Context, host string) []byte {
	var out bytes.Buffer
	t.mu.Lock()
	if b := t.logs[host]; b != nil {
		out.Write(b.Bytes())
	}
	t.mu.Unlock()
	if t.cs == nil || t.logsAreFinal() {
		return out.Bytes()
	}
	pods, err := t.pods(ctx, host)
	if err != nil {
		return out.Bytes()
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
	for i := range pods {
		t.mu.Lock()
		seen := t.saved[pods[i].Name]
		t.mu.Unlock()
		if !seen {
			out.Write(t.podLog(ctx, &pods[i]))
		}
	}
	return out.Bytes()
}

func (t *kindTopo) logsAreFinal() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.logsFinal
}

// CollectLogs writes <host>.log for every component host (pod logs; those of pods a lever
// removed were saved before they went, and Down saves the rest before deleting anything).
func (t *kindTopo) CollectLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, h := range t.hosts() {
		b := t.logsNow(ctx, h)
		if len(b) == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, h+".log"), b, 0o600); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
