module github.com/gpuchaos/gpuchaos

go 1.26.7

require (
	github.com/spf13/cobra v1.10.2
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/prometheus/common v0.72.1 // indirect
	github.com/prometheus/prometheus v0.316.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
)
