package service

import (
	"context"
	"time"

	"github.com/gpumesh/gpumesh/node/api"
)

// Scale to zero (api.ServiceSpec.ScaleToZero): a service idle for its
// IdleAfter drains every replica (sleepIfIdle); a request that finds
// none routable wakes it and waits for the first replica ready
// (awaitReplica); the time from that request to that replica is the cold
// start (coldStarted).

// normalizeZero checks and defaults the scale-to-zero fields.
func normalizeZero(spec *api.ServiceSpec) error {
	if !spec.ScaleToZero {
		if spec.IdleAfter != 0 {
			return badRequest("service: idle after is for a service that scales to zero: give scale to zero too")
		}
		return nil
	}
	if spec.IdleAfter == 0 {
		spec.IdleAfter = api.DefaultIdleAfter
	}
	if spec.IdleAfter < api.MinIdleAfter {
		return badRequest("service: idle after must be at least %s, got %s", api.MinIdleAfter, spec.IdleAfter)
	}
	return nil
}

// requested notes a request's arrival and its end, for sleepIfIdle: a
// service is idle for its IdleAfter from the end of its last request (a
// long answer is not idle time), noted before the request leaves its
// replica's outstanding count.
func (s *Service) requested() { s.lastRequest.Store(s.now().UnixNano()) }

// sleepIfIdle scales a ScaleToZero service to zero once no request has
// come for its IdleAfter and none is in flight or waiting; s.mu is held.
func (s *Service) sleepIfIdle(now time.Time) {
	if !s.spec.ScaleToZero || s.asleep || s.waiting.Load() > 0 {
		return
	}
	idle := now.Sub(time.Unix(0, s.lastRequest.Load()))
	if idle < s.spec.IdleAfter {
		return
	}
	for _, r := range s.reps {
		if r.outstanding.Load() > 0 {
			return
		}
	}
	s.asleep, s.desired, s.lowSince = true, 0, time.Time{}
	s.event("no request for %s: scaling to zero", idle.Round(time.Second))
}

// wake leases the service's replicas again after it scaled to zero: a
// request came. The control loop is kicked to lease them at once.
func (s *Service) wake() {
	s.mu.Lock()
	if s.asleep && !s.stopped {
		s.asleep, s.desired, s.wakeAt = false, s.spec.Replicas, s.now()
		s.postFailures = 0 // a failed auction while asleep is no reason to wait now
		s.event("a request while scaled to zero: leasing %d replica(s) (cold start)", s.desired)
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// awaitReplica is the replica for a request that found none routable, in
// a ScaleToZero service: it wakes the service and waits for the first
// replica ready, within the spec's StartTimeout and the request's
// context; nil when none came (or the service does not scale to zero).
func (s *Service) awaitReplica(ctx context.Context) *replica {
	if !s.spec.ScaleToZero {
		return nil
	}
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	s.wake()
	t := time.NewTimer(s.spec.StartTimeout)
	defer t.Stop()
	for {
		changed := s.routeChanged.Wait()
		if r := s.pick(nil); r != nil {
			return r
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		case <-t.C:
			return nil
		}
	}
}

// coldStarted takes the first replica ready after a wake: the cold
// start's time; s.mu is held.
func (s *Service) coldStarted(now time.Time) {
	if s.wakeAt.IsZero() {
		return
	}
	d := now.Sub(s.wakeAt)
	s.wakeAt, s.coldStarts, s.lastColdStart = time.Time{}, s.coldStarts+1, d
	s.event("cold start: a replica ready %s after the request that woke the service", d.Round(time.Millisecond))
}
