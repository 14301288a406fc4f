// Package jobmaster is the JobMaster of one job under one leadership
// grant: it gets slots from the ResourceManager, deploys every subtask to
// TaskExecutors, tracks the states they report, restarts the job as its
// restart strategy allows, and ends with the job's result.
//
// All of a JobMaster's state belongs to one goroutine (Run's); RPCs and
// the Dispatcher reach it through events, as Flink's main-thread executor
// does. Every JobMasterService call is checked against the JobMaster's
// fencing token. The job's status moves only along the transitions of
// package jobstatus.
package jobmaster
