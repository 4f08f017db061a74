"""dlbench-lstm: an LSTM sequence classifier as a dlbench workload plugin (the neutral module
is `workload`, one builder module per framework beside it). Importing the package imports no
framework."""
