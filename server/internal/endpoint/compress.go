package endpoint

// CompressMinBytes is the size, in bytes of the encoded message, under
// which no message is compressed, in either direction: the handlers of
// every endpoint and the clients of ClientOptions send smaller messages as
// they are, whatever compression the peer accepts.
//
// 1 KiB is about where gzip starts to pay. A message under it, with its
// headers, fits in one Ethernet frame (1500 bytes) compressed or not, so
// compressing it saves no packet and no round trip, while gzip costs a
// fixed 10–40 µs of CPU per message (its state is reset each time) and
// even grows a message under about 100 bytes. The frequent answers (job
// status, heartbeats, SubmitJob, GetClusterOverview, WatchJob events) are
// all well under it; those that grow with the cluster (ListJobs pages, a
// job's subtasks in GetJob's full view) are well over it and shrink about
// threefold.
const CompressMinBytes = 1024
