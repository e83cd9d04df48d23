# stage 1 (round 1)
# demo-evocode-3-stage1-keep
