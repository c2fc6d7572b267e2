"""Performance-testing tools in Wallaroo's tradition (Giles sender and receiver).

`generate` writes synthetic fixish NBBO and order files, `sender` replays them to a
TCP port at a controlled rate, `receiver` collects result frames into a file. Each
module has `add_arguments(parser)` and `run(args)` for the CLI, and plain functions
for tests, benchmarks and the replay command.
"""
