package replay

import "time"

// Series is one line of the utilisation chart: per time bucket, the share
// of offered idle GPU time that was leased.
type Series struct {
	Name   string
	Dashed bool      // a bound, not a policy
	Days   []float64 // bucket start, days since Report.Start
	Share  []float64 // leased / offered idle, in [0, 1]
}

// Utilisation is the chart's data: one series per policy, then the fluid
// bound (dashed).
func (r *Report) Utilisation() []Series {
	series := func(name string, filled []float64, dashed bool) Series {
		s := Series{Name: name, Dashed: dashed}
		for i, v := range filled {
			if i >= len(r.offered) {
				break
			}
			y := 0.0
			if r.offered[i] > 0 {
				y = v / r.offered[i]
			}
			s.Days = append(s.Days, (time.Duration(i)*r.bucket).Hours()/24)
			s.Share = append(s.Share, y)
		}
		return s
	}
	out := make([]Series, 0, len(r.Policies)+1)
	for _, pol := range r.Policies {
		out = append(out, series(pol.Policy, pol.util, false))
	}
	return append(out, series("bound (fluid)", r.bound, true))
}
