module github.com/jobplane/jobplane/sdk

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/jobplane/jobplane/gen v0.0.0-00010101000000-000000000000
	go.opentelemetry.io/otel v1.46.0
	go.opentelemetry.io/otel/trace v1.46.0
	go.uber.org/goleak v1.3.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261104224025-d1e00e9f33ab
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel/metric v1.46.0 // indirect
)

// The generated code is a module of this repository; a build inside the
// repository takes it from its folder (go.work does too).
replace github.com/jobplane/jobplane/gen => ../gen
