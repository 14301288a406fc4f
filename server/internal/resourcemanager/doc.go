// Package resourcemanager is the ResourceManager: it keeps the cluster's
// TaskExecutors and their slots, and hands slots to JobMasters by the
// requirements they declare, asking each TaskExecutor for the slots
// allocated there in one RequestSlots (RequestSlot per slot to a
// TaskExecutor without it).
//
// It serves only while its process leads the election "jobmanager" (see
// Lead); its fencing token is that grant's. It registers a JobMaster
// token it has not registered only if the store shows it as the current
// grant of the job's election (Config.Elections): one store read per new
// registration, none per call. It keeps no durable state: a
// new leader relearns slots and allocations from TaskExecutor
// registrations and slot reports, and requirements from the JobMasters.
package resourcemanager
