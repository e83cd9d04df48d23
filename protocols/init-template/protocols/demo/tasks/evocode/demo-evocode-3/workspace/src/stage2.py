# stage 2 (round 1)
# demo-evocode-3-stage2-keep
