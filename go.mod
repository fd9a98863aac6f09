module github.com/meshwave/meshwave

go 1.26
