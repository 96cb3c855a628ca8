package dockerengine

// Teardown of a docker run: its containers, then its networks, then its volume, each found by
// the run's labels. Down and Cleanup (`quotaqual down --run-id`) both end here.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/images"
)

const (
	// teardownContainersWithin bounds how long containers of the run may keep appearing (a
	// create still in flight on the daemon) before the teardown reports them.
	teardownContainersWithin = 10 * time.Second
	// teardownNetworkWithin bounds the retries of one network's removal while the daemon still
	// counts endpoints on it.
	teardownNetworkWithin = 15 * time.Second
	// teardownPoll is the interval of both retries.
	teardownPoll = 200 * time.Millisecond
)

func dockerCleanup(ctx context.Context, cli *testcontainers.DockerClient, runID string) topology.Teardown {
	var td topology.Teardown
	f := make(client.Filters).Add("label", images.LabelRunID+"="+runID).Add("label", images.LabelManaged+"=true")
	removeRunContainers(ctx, cli, f, &td)
	ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		td.Errors = append(td.Errors, "listing networks: "+err.Error())
	}
	for _, n := range ns.Items {
		if err := removeNetwork(ctx, cli, n.ID, teardownNetworkWithin); err != nil {
			td.Errors = append(td.Errors, "removing network "+n.Name+": "+err.Error())
		} else {
			td.Removed = append(td.Removed, "network "+n.Name)
		}
	}
	vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		td.Errors = append(td.Errors, "listing volumes: "+err.Error())
	}
	for _, v := range vs.Items {
		if _, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil {
			td.Errors = append(td.Errors, "removing volume "+v.Name+": "+err.Error())
		} else {
			td.Removed = append(td.Removed, "volume "+v.Name)
		}
	}
	slices.Sort(td.Removed)
	return td
}

// removeRunContainers removes the containers matching f until a listing finds none. A container
// create whose request was cancelled (a store group still starting when Down came) may still
// complete on the daemon after a listing (a CI run saw a netfilter sidecar appear after the
// first pass), so it lists again every teardownPoll, for teardownContainersWithin at most.
// Only the last round's errors are the teardown's: a container whose removal failed once and
// that a later listing no longer finds (removed on a retry, or gone by itself) is not left
// behind, and one that keeps failing is reported once, not once a round.
func removeRunContainers(ctx context.Context, cli *testcontainers.DockerClient, f client.Filters, td *topology.Teardown) {
	deadline := time.Now().Add(teardownContainersWithin)
	for {
		found, errs := removeContainers(ctx, cli, f, td)
		if found == 0 {
			td.Errors = append(td.Errors, errs...)
			return
		}
		if !pollAgain(ctx, deadline) {
			found, errs = removeContainers(ctx, cli, f, td)
			td.Errors = append(td.Errors, errs...)
			if found > 0 {
				td.Errors = append(td.Errors, fmt.Sprintf("containers of the run still appeared after %s of removing them", teardownContainersWithin))
			}
			return
		}
	}
}

// removeContainers stops and then removes every container matching f, recording each one
// removed in td, and returns how many it found and the errors of this round. The stop comes
// first, and is awaited, so that the daemon has finished with a container's network endpoints
// before its removal: a container force-removed while the daemon was still disconnecting it
// can leave a stale endpoint behind (removeNetwork).
func removeContainers(ctx context.Context, cli *testcontainers.DockerClient, f client.Filters, td *topology.Teardown) (int, []string) {
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return 0, []string{"listing containers: " + err.Error()}
	}
	var mu sync.Mutex
	var errs []string
	var wg sync.WaitGroup
	for _, c := range cs.Items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := c.ID[:12]
			if len(c.Names) > 0 {
				name = strings.TrimPrefix(c.Names[0], "/")
			}
			// No grace: the logs are saved already and the run is over. A stop that fails
			// (the container is gone, or never started) leaves the verdict to the removal.
			noGrace := 0
			_, _ = cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{Timeout: &noGrace})
			_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, "removing container "+name+": "+err.Error())
			} else {
				td.Removed = append(td.Removed, "container "+name)
			}
		}()
	}
	wg.Wait()
	slices.Sort(errs)
	return len(cs.Items), errs
}

// removeNetwork removes network id. The daemon refuses while it counts an endpoint on the
// network ("has active endpoints"), and it can count one no container holds: moby keeps a
// stale endpoint record when a container is removed while the daemon is still disconnecting
// it (a CI run left a run's admin network behind so, with no container attached). Only a
// forced disconnect by the endpoint's name (its container's name, which works for a container
// that is gone) or a daemon restart clears it. So on that refusal removeNetwork
// force-disconnects every endpoint the network lists and tries again, every teardownPoll,
// for within at most. The network is the run's: any endpoint still on it has to go.
func removeNetwork(ctx context.Context, cli *testcontainers.DockerClient, id string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var disconnected []string // the last round's
	for round := 0; ; round++ {
		_, err := cli.NetworkRemove(ctx, id, client.NetworkRemoveOptions{})
		if err == nil || !strings.Contains(err.Error(), "active endpoints") {
			return err
		}
		// The first disconnect is tried at once; later ones after a poll interval (the
		// daemon may still be finishing a disconnect of its own).
		if round > 0 && !pollAgain(ctx, deadline) {
			if len(disconnected) == 0 {
				return fmt.Errorf("%w (for %s, and the network listed no endpoint to disconnect)", err, within)
			}
			return fmt.Errorf("%w (for %s, after %d rounds of force-disconnecting, the last: %s)", err, within, round, strings.Join(disconnected, ", "))
		}
		disconnected = forceDisconnectEndpoints(ctx, cli, id)
	}
}

// forceDisconnectEndpoints force-disconnects every endpoint network id lists, by the
// endpoint's name: for a stale endpoint the daemon lists the name of the container that held
// it under a key that names no container ("ep-<endpoint id>"), and deletes the endpoint when
// no container of that name exists any more. It returns what it tried, each with the error
// when the disconnect failed.
func forceDisconnectEndpoints(ctx context.Context, cli *testcontainers.DockerClient, id string) []string {
	ins, err := cli.NetworkInspect(ctx, id, client.NetworkInspectOptions{})
	if err != nil {
		return []string{"none (inspecting the network: " + err.Error() + ")"}
	}
	var tried []string
	for key, ep := range ins.Network.Containers {
		name := cmp.Or(ep.Name, key)
		if _, err := cli.NetworkDisconnect(ctx, id, client.NetworkDisconnectOptions{Container: name, Force: true}); err != nil {
			name += " (" + err.Error() + ")"
		}
		tried = append(tried, name)
	}
	slices.Sort(tried)
	return tried
}

// pollAgain waits one teardownPoll (less when the deadline comes first) and says whether to
// try again: not once the deadline has passed or ctx is done.
func pollAgain(ctx context.Context, deadline time.Time) bool {
	left := time.Until(deadline)
	if left <= 0 {
		return false
	}
	tick := time.NewTimer(min(teardownPoll, left))
	defer tick.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tick.C:
		return true
	}
}
