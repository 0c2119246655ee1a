// Package scheduler runs the primary's scheduling work: request_task selection, worker caps,
// results, itp, dead-task scavenging and the other periodic jobs. A Primary owns all of it for
// as long as the instance is the primary: the run cache, the Scheduler and the jobs' goroutines.
package scheduler
