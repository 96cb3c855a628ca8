package ledger

import (
	"context"
	"strconv"
)

// ReserveWithID runs the reserve script for a given reservation id, as a reserve that timed out
// in the client and was executed by the store later (after its release) would: the test can
// issue the calls in the order valkey-go's several connections may deliver them.
func (v *Valkey) ReserveWithID(ctx context.Context, q *Quota, key string, estimate int64, id string) ([]int64, error) {
	sk := v.layout(q, key, 4+2*len(q.Budgets))
	sk.args = append(sk.args, strconv.FormatInt(estimate, 10), sk.leaseArg, id, sk.inspectArgs[0])
	sk.args = append(sk.args, sk.reserveArgs...)
	return v.run(ctx, "reserve", reserveScript, sk.keys, sk.args)
}
