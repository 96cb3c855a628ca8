package scenarios

import "sync"

// sideBySide bounds how many scenarios that pull no lever run at once. Most of their time is
// waiting (windows, leases, holds), but each also sends bursts; on 2 cores more at once would
// only queue their requests behind each other and stretch the timing-sensitive ones.
const sideBySide = 6

// schedule runs every scenario of list through run, exactly once, and returns when all have
// finished:
//
//   - the exclusive scenarios (Scenario.Exclusive set) one at a time, each with the topology
//     to itself: first those that hand it back after their lever (SharesAfterLever), then the
//     others, each group in list order;
//   - the shared ones side by side (at most sideBySide at once), as one block that starts as
//     soon as the topology is shared: when an exclusive scenario hands it back early (its
//     share function, called through Env.ShareTopology, once its lever is released) or when
//     no exclusive scenario is left. The next exclusive scenario waits until the block and
//     the one that handed the topology back have both finished.
//
// So the block overlaps the wait of a scenario that hands the topology back, and the levers
// that do not come after it — when the components have long been up (on docker the
// replicated store group is still starting in the background right after Up).
//
// run gets the scenario's index and, for an exclusive scenario, its share function (nil for a
// shared one).
func schedule(list []Scenario, run func(i int, share func())) {
	var handsBack, exclusive, shared []int
	for i, sc := range list {
		switch {
		case sc.Exclusive != "" && sc.SharesAfterLever:
			handsBack = append(handsBack, i)
		case sc.Exclusive != "":
			exclusive = append(exclusive, i)
		default:
			shared = append(shared, i)
		}
	}
	exclusive = append(handsBack, exclusive...)

	open := make(chan struct{}) // closed when the shared block may start
	var openOnce sync.Once
	share := func() { openOnce.Do(func() { close(open) }) }
	blockDone := make(chan struct{}) // closed when every shared scenario has finished

	go func() {
		defer close(blockDone)
		<-open
		boundedEach(sideBySide, shared, func(i int) { run(i, nil) })
	}()

	for _, i := range exclusive {
		select {
		case <-open:
			// The block started beside an earlier scenario: this lever must wait for it.
			<-blockDone
		default:
		}
		run(i, share)
	}
	share()
	<-blockDone
}

// onOwnTopologies runs every scenario of list (indices) through run, each on a topology of its
// own, at most limit at once (at least one), and returns when all have finished. Each topology
// is up only while its scenario runs, so limit also bounds how many extra topologies are up.
func onOwnTopologies(limit int, list []int, run func(i int)) { boundedEach(max(limit, 1), list, run) }

// boundedEach calls run for every index of list, each on its own goroutine, at most limit at once,
// starting them in list order, and returns when all have returned.
func boundedEach(limit int, list []int, run func(i int)) {
	slots := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for _, i := range list {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			run(i)
		}()
	}
	wg.Wait()
}
