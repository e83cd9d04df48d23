# stage 1 (round 1)
# demo-evocode-2-stage1-keep
