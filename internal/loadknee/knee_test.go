package loadknee

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// capacityProbe is a machine that carries up to capacity requests/s: the search logic alone.
func capacityProbe(capacity int, ran *[]int) Probe {
	return func(_ context.Context, rate int) (Step, error) {
		*ran = append(*ran, rate)
		s := Step{Rate: rate, Requests: rate, Sustained: float64(rate), AdmitP99: time.Millisecond}
		if rate > capacity {
			s.Sustained = float64(capacity)
		}
		Bounds{MaxLag: 0.01, AdmitP99: time.Second}.Judge(&s)
		return s, nil
	}
}

func TestSearchDoublesThenBisects(t *testing.T) {
	var ran []int
	knee, steps, err := Search(context.Background(), 100, 100000, 10, 0.05, capacityProbe(1300, &ran))
	if err != nil {
		t.Fatal(err)
	}
	// 100, 200, 400, 800 pass; 1600 fails; then bisection between 800 and 1600.
	if !slices.Equal(ran[:5], []int{100, 200, 400, 800, 1600}) {
		t.Fatalf("rates run %v: want doubling 100…1600 first", ran)
	}
	if knee == nil || knee.Rate > 1300 || knee.Rate < 1300-int(0.05*1600)-1 {
		t.Fatalf("knee %+v: want within one resolution step below the capacity 1300 (rates run %v)", knee, ran)
	}
	if len(steps) != len(ran) {
		t.Fatalf("%d steps for %d runs", len(steps), len(ran))
	}
	for _, s := range steps {
		if s.OK != (s.Rate <= 1300) {
			t.Errorf("step at %d/s judged OK=%v", s.Rate, s.OK)
		}
	}
}

func TestSearchStopsAtMaxAndWhenStartFails(t *testing.T) {
	var ran []int
	knee, _, err := Search(context.Background(), 100, 300, 10, 0.05, capacityProbe(1000, &ran))
	if err != nil || knee == nil || knee.Rate != 300 || !slices.Equal(ran, []int{100, 200, 300}) {
		t.Fatalf("knee %+v err %v after %v: want 300 reached at max after 100, 200, 300", knee, err, ran)
	}
	ran = nil
	knee, steps, err := Search(context.Background(), 100, 300, 10, 0.05, capacityProbe(50, &ran))
	if err != nil || knee != nil || len(steps) != 1 {
		t.Fatalf("knee %+v, %d steps, err %v: want no knee after the one failing start", knee, len(steps), err)
	}
	if _, _, err := Search(context.Background(), 0, 10, 1, 0, capacityProbe(50, &ran)); err == nil {
		t.Fatal("start 0 accepted")
	}
}

func TestSearchReturnsAProbeError(t *testing.T) {
	boom := errors.New("topology went away")
	n := 0
	knee, steps, err := Search(context.Background(), 10, 1000, 1, 0, func(_ context.Context, rate int) (Step, error) {
		if n++; n == 3 {
			return Step{}, boom
		}
		return Step{Rate: rate, OK: true}, nil
	})
	if !errors.Is(err, boom) || knee == nil || knee.Rate != 20 || len(steps) != 2 {
		t.Fatalf("knee %+v, %d steps, err %v: want the error, with the last good step (20/s)", knee, len(steps), err)
	}
}

func TestJudgeNamesEveryMissedCondition(t *testing.T) {
	s := Step{Rate: 1000, Requests: 5000, Sustained: 980, AdmitP99: 800 * time.Millisecond, OverAdmission: 15,
		Answers: map[string]int{"200": 10, "503": 2, "no answer": 1}}
	Bounds{MaxLag: 0.01, AdmitP99: 500 * time.Millisecond}.Judge(&s)
	if s.OK || len(s.Why) != 5 {
		t.Fatalf("judged %v %q: want not OK with 5 reasons (lag, 5xx, no answer, p99, over-admission)", s.OK, s.Why)
	}
	s = Step{Rate: 1000, Requests: 5000, Sustained: 995, AdmitP99: time.Millisecond, Answers: map[string]int{"200": 10, "429": 4}}
	Bounds{MaxLag: 0.01, AdmitP99: 500 * time.Millisecond}.Judge(&s)
	if !s.OK {
		t.Fatalf("judged not OK: %q", s.Why)
	}
}
