package altgateway

import (
	"context"
	"strconv"
	"time"
)

// counter is the fixed-window allowance: key <prefix>:<caller>:<window number>, where the
// window number is the Unix time divided by the period. Everything a window admitted is
// forgotten at its boundary, at once.
type counter struct {
	s *Settings
}

func (c counter) key(caller string, window int64) string {
	return c.s.Counter.KeyPrefix + ":" + caller + ":" + strconv.FormatInt(window, 10)
}

// window is the number of the window now falls in and the time left in it.
func (c counter) window(now time.Time) (int64, time.Duration) {
	p := int64(c.s.period)
	n := now.UnixNano() / p
	return n, time.Duration((n+1)*p - now.UnixNano())
}

// charge adds n tokens to caller's count in window and returns the new count; the key expires
// two periods later.
func (c counter) charge(ctx context.Context, caller string, window, n int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.s.deadline)
	defer cancel()
	k := c.key(caller, window)
	r, err := valkeyDo(ctx, c.s.Counter.Address, c.s.password,
		[]string{"INCRBY", k, strconv.FormatInt(n, 10)},
		[]string{"EXPIRE", k, strconv.Itoa(2 * c.s.Allowance.PeriodSeconds)})
	if err != nil {
		return 0, err
	}
	return r[len(r)-2], nil
}

// ping answers whether the counter store answers.
func (c counter) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.s.deadline)
	defer cancel()
	_, err := valkeyDo(ctx, c.s.Counter.Address, c.s.password, []string{"PING"})
	return err
}
