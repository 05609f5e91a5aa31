module github.com/ledgerflow/ledgerflow/sdk/go

go 1.19
