// Package hastorerpc carries a hastore.Store over the network: Handler
// serves any Store as the HAStoreService Connect service, and Client
// implements hastore.Store over an HAStoreService client, so a server in
// another process (or language) can use a jobplane HA store. The service
// has no call that records a result and cleans up, or puts a plan and
// campaigns, at once: Client's FinishJob and PutExecutionPlanAndLead take
// the contract's plain steps (hastore.FinishJobInSteps,
// hastore.PutExecutionPlanNoLead).
//
// It owns the translation between hastore's domain types and errors and
// the wire (proto messages, Connect codes, ErrorInfo and BadRequest
// details), in both directions, and nothing else.
package hastorerpc
