// Package jobmaster is the JobMaster of one job under one leadership
// grant: it gets slots from the ResourceManager, deploys the job's regions
// to TaskExecutors as the scheduler releases them (a region once slots
// for all of it are at hand; eagerly if the job asks), tracks the states
// the TaskExecutors report, restarts failed regions and the regions
// downstream of them as the restart strategy allows, gives back the slots
// of finished regions, and ends with the job's result.
//
// All of a JobMaster's state belongs to one goroutine at a time: events
// (RPCs, reports, the Dispatcher's calls, deadlines) are queued and
// handled in order by the goroutine that drains the queue, as Flink's
// main-thread executor does; no goroutine is kept while the queue is
// empty, so a job waiting for slots holds none. Every JobMasterService call is checked against the JobMaster's
// fencing token. The job's status moves only along the transitions of
// package jobstatus: RUNNING while regions restart, RESTARTING while every
// region does.
package jobmaster
