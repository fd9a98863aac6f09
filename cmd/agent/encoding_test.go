package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestAnEncodingThatIsNotProtobufOrJSONIsRefused(t *testing.T) {
	code, _, stderr := invoke(t, "meshwave", "status", "--kube-api-encoding", "yaml")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `invalid value "yaml" for flag -kube-api-encoding: "yaml" is not an encoding: expected protobuf or json`)
}
