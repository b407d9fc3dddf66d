package pgstore_test

func runChild() bool { return false }
