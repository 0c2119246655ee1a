package scheduler

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// Job is work repeated every Period. Like fishtest's scheduler, each run starts Period after the
// previous one started, but never sooner than MinDelay after it ended, plus or minus Jitter of
// that wait, so jobs started together drift apart instead of hitting the database in lockstep.
type Job struct {
	Name     string
	Period   time.Duration
	Initial  time.Duration // delay before the first run; 0 means one Period
	MinDelay time.Duration
	Jitter   float64 // fraction of Period, e.g. 0.05
	Run      func(ctx context.Context) error
}

// Periodic runs jobs, each in its own goroutine, until Stop. A job's error is logged and the job
// carries on: a transient database error must never stop the flusher. Safe for concurrent use.
type Periodic struct {
	logger *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// Start launches jobs and returns at once. The jobs' contexts are derived from ctx and also end
// at Stop.
func Start(ctx context.Context, logger *slog.Logger, jobs ...Job) *Periodic {
	ctx, cancel := context.WithCancel(ctx)
	p := &Periodic{logger: logger, cancel: cancel}
	for _, j := range jobs {
		p.wg.Add(1)
		go p.loop(ctx, j)
	}
	return p
}

func (p *Periodic) loop(ctx context.Context, j Job) {
	defer p.wg.Done()
	delay := j.Initial
	if delay <= 0 {
		delay = j.Period
	}
	timer := time.NewTimer(jitter(delay, j.Jitter))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		if err := j.Run(ctx); err != nil && ctx.Err() == nil {
			p.logger.Warn("periodic job failed", "job", j.Name, "err", err)
		}
		next := max(j.Period-time.Since(start), j.MinDelay)
		timer.Reset(jitter(next, j.Jitter))
	}
}

func jitter(d time.Duration, frac float64) time.Duration {
	if frac <= 0 || d <= 0 {
		return d
	}
	return d + time.Duration((rand.Float64()*2-1)*frac*float64(d))
}

// Stop ends every job and waits for runs in progress to return. It is idempotent.
func (p *Periodic) Stop() {
	p.once.Do(func() {
		p.cancel()
		p.wg.Wait()
	})
}
