module talos-ccm/tests/h2peer

go 1.25.0

require golang.org/x/net v0.55.0

require golang.org/x/text v0.37.0 // indirect
