package main

func maxThroughput(args []string) (*report, error) { return nil, nil }
func latency(args []string) (*report, error)       { return nil, nil }
