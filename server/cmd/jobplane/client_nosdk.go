//go:build !sdkclient

package main

import "github.com/spf13/cobra"

func clientCommands(a *app) []*cobra.Command { return nil }
