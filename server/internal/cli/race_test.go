//go:build race

package cli

func init() { raceBuild = []string{"-race"} }
