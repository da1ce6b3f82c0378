package controllers

import "testing"

// The reward summary: a mean, and a Student-t 95% interval from two rewards on.
func TestRewardSummary(t *testing.T) {
	cases := []struct {
		in             []float64
		mean, interval string
	}{
		{nil, "", ""},
		{[]float64{0.5}, "0.5", ""},
		{[]float64{0, 1, 1}, "0.6667", "[-0.7677, 2.101]"},
		{[]float64{1, 1, 1, 1}, "1", "[1, 1]"},
	}
	for _, tc := range cases {
		m, i := rewardSummary(tc.in)
		if m != tc.mean || i != tc.interval {
			t.Errorf("rewardSummary(%v) = %q, %q; want %q, %q", tc.in, m, i, tc.mean, tc.interval)
		}
	}
}
