// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// @title LookalikeToken: emits ERC-20-shaped Transfer events and holds no balances at all.
/// @notice A test fixture: a contract at another address whose Transfer logs look exactly like a
///   real token's. A ledger that counted them would record tokens the agent never received.
contract LookalikeToken {
    string public constant symbol = "WETH";
    uint8 public constant decimals = 18;

    event Transfer(address indexed from, address indexed to, uint256 value);

    function echo(address to, uint256 value) external {
        emit Transfer(msg.sender, to, value * 1000);
    }
}
