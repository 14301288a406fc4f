package batch

import "google.golang.org/protobuf/proto"

// MaxBytes bounds the items of one batch call, in encoded bytes: a
// quarter of the endpoints' default request limit
// (endpoint.DefaultMaxRequestBytes), which leaves room for the rest of
// the request.
const MaxBytes = 1 << 20

// MaxItems bounds the items of one batch call, whatever their size, so
// that one call's work on its receiver stays short.
const MaxItems = 1024

// Split cuts items into consecutive runs of at most MaxItems items and
// MaxBytes encoded bytes each; an item larger than MaxBytes goes alone.
// It returns no run for no items.
func Split[T proto.Message](items []T) [][]T {
	return split(items, func(m T) int { return proto.Size(m) })
}

// Strings cuts strings (allocation ids, say) into runs as Split does.
func Strings(items []string) [][]string {
	return split(items, func(s string) int { return len(s) + 2 }) // the tag and length of a short string
}

// split cuts items into runs as Split says, sizing each with size.
func split[T any](items []T, size func(T) int) [][]T {
	var (
		runs  [][]T
		start int
		bytes int
	)
	for i, it := range items {
		n := size(it)
		if i > start && (i-start >= MaxItems || bytes+n > MaxBytes) {
			runs = append(runs, items[start:i])
			start, bytes = i, 0
		}
		bytes += n
	}
	if start < len(items) {
		runs = append(runs, items[start:])
	}
	return runs
}
