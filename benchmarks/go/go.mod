// weft's Go baselines (docs/weft-bench.md): the standard library only,
// no requirements, so that they build without a network.
module weftbench

go 1.16
