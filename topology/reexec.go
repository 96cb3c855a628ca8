package topology

// Re-execution into the run's namespaces (netns engine).
//
// A Go process cannot unshare a user namespace once it runs more than one thread, so the netns
// engine needs the whole harness process (`quotaqual run`, `quotaqual up`, the topology tests)
// to start inside its own user + network + mount + pid namespaces. ReexecIntoNamespace does
// that at the top of such a command: outside, it starts the same binary with the same
// arguments as pid 1 of fresh namespaces (uid 0 inside mapped to the caller's uid outside, so
// it works as root and as an ordinary user), forwards stdio, signals and the exit code, and
// returns the child's exit code for the caller to exit with. Inside (the marker below is set
// and we are pid 1), it finishes the mount setup and returns inside=true: the command carries on
// and New("netns", ...) builds the hosts.
//
// Why this design: the harness process itself is the "observer" and owns the bridge, so
// Observer() is a plain HTTP client, readiness polling needs nothing special, and Client() and
// Probe() only switch one locked OS thread into a host namespace to create a socket (sockets
// keep their namespace). It is crash-safe by construction: the child is pid 1 of its pid
// namespace and gets SIGKILL when the outer process dies (Pdeathsig); when pid 1 dies the
// kernel kills every process in the namespace, and the network namespaces, veths, bridge,
// nftables rules and the tmpfs holding /run/netns vanish with the last reference. Nothing is
// ever created in the host's namespaces, and since every run has its own user and network
// namespace, parallel runs can all use the same fixed addresses without colliding.

// envInside marks the re-executed process; its value is the run id.
const envInside = "QUOTAQUAL_NETNS_INSIDE"

// envFDs says how many listeners the outer process passed down (fds 3, 4, ...).
const envFDs = "QUOTAQUAL_NETNS_FDS"
