package ledger

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a YAML duration written as a whole number and a unit: ms, s, m or h (500ms, 30s,
// 1m, 168h). Days and weeks are refused on purpose: 7d is ambiguous across DST; write 168h.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String renders the duration in the largest unit that divides it.
func (d Duration) String() string {
	v := time.Duration(d)
	switch {
	case v == 0:
		return "0s"
	case v%time.Hour == 0:
		return strconv.FormatInt(int64(v/time.Hour), 10) + "h"
	case v%time.Minute == 0:
		return strconv.FormatInt(int64(v/time.Minute), 10) + "m"
	case v%time.Second == 0:
		return strconv.FormatInt(int64(v/time.Second), 10) + "s"
	default:
		return strconv.FormatInt(int64(v/time.Millisecond), 10) + "ms"
	}
}

// ParseDuration parses "<whole number><ms|s|m|h>". Zero is refused: no duration in the policy
// means "nothing", and an absent field is how a default is asked for.
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	if num, ok := strings.CutSuffix(t, "d"); ok && isWhole(num) {
		return 0, fmt.Errorf("%q: days are not accepted; write hours (7d is 168h)", s)
	}
	if num, ok := strings.CutSuffix(t, "w"); ok && isWhole(num) {
		return 0, fmt.Errorf("%q: weeks are not accepted; write hours (1w is 168h)", s)
	}
	units := []struct {
		suffix string
		unit   time.Duration
	}{{"ms", time.Millisecond}, {"s", time.Second}, {"m", time.Minute}, {"h", time.Hour}}
	for _, u := range units {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok || num == "" {
			continue
		}
		n, err := strconv.ParseUint(num, 10, 63)
		if err != nil {
			break
		}
		if n > uint64(math.MaxInt64/int64(u.unit)) {
			return 0, fmt.Errorf("%q is too long a duration", s)
		}
		if n == 0 {
			return 0, fmt.Errorf("%q is zero; write a positive duration or remove the key for the default", s)
		}
		return Duration(time.Duration(n) * u.unit), nil
	}
	return 0, fmt.Errorf("%q is not a duration; write a whole number with ms, s, m or h (500ms, 30s, 1m, 168h)", s)
}

func isWhole(s string) bool {
	_, err := strconv.ParseUint(s, 10, 63)
	return err == nil
}

// UnmarshalYAML accepts only the scalar form.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("a duration must be a scalar such as 30s")
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalYAML writes the canonical form.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }
