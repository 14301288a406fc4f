package hastore

import "context"

// CandidateCounter is implemented by a Store that can tell how many
// processes campaign in an election now, its leader among them: the
// Dispatcher reports the others as the cluster's standbys
// (GetClusterOverviewResponse.standby_count). A Store that does not
// implement it (HAStoreService lists no candidates) leaves that unknown.
type CandidateCounter interface {
	// Candidates returns the number of campaigns of election that are
	// open now: the leader's, and each standby's.
	Candidates(ctx context.Context, election string) (int, error)
}
