// Command meshwave is the meshwave agent and its CLI.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "usage: meshwave run | plan | status")
	os.Exit(2)
}
