# stage 2 (round 1)
# demo-evocode-2-stage2-keep
