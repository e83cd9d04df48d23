// STAND-IN: the real candidate package is installed here by swapping this directory.
module.exports = { standIn: true, arm: "v0.4-contract" };
