module github.com/gocurrent/gocurrent

go 1.26

require github.com/google/btree v1.1.3
