# stage 2 (round 1)
# demo-evocode-1-stage2-keep
