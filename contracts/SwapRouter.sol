// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

interface IERC20Like {
    function transfer(address to, uint256 value) external returns (bool);
    function transferFrom(address from, address to, uint256 value) external returns (bool);
}

interface ITransferEcho {
    function echo(address to, uint256 value) external;
}

/// @title SwapRouter: a minimal fixed-rate router with a Uniswap-V2-shaped swap call.
/// @notice The owner sets a rate per token pair and funds the router with the output token.
///   `swapExactTokensForTokens` reverts on purpose when the output is below `amountOutMin`
///   (INSUFFICIENT_OUTPUT_AMOUNT), past the deadline (EXPIRED), or when the router lacks the
///   output token (the token's INSUFFICIENT_BALANCE). An optional `echo` contract is called on
///   every swap, so tests can make a look-alike contract emit a Transfer inside the same tx.
contract SwapRouter {
    address public owner;
    address public echo;
    /// @dev output base units per input base unit, scaled by 1e18
    mapping(address => mapping(address => uint256)) public rate;

    event Swapped(address indexed sender, address indexed to, uint256 amountIn, uint256 amountOut);

    constructor() {
        owner = msg.sender;
    }

    modifier onlyOwner() {
        require(msg.sender == owner, "ONLY_OWNER");
        _;
    }

    function setRate(address tokenIn, address tokenOut, uint256 outPerInE18) external onlyOwner {
        rate[tokenIn][tokenOut] = outPerInE18;
    }

    function setEcho(address echo_) external onlyOwner {
        echo = echo_;
    }

    function withdraw(address token, uint256 value) external onlyOwner {
        require(IERC20Like(token).transfer(msg.sender, value), "TRANSFER_FAILED");
    }

    function getAmountsOut(uint256 amountIn, address[] calldata path)
        public
        view
        returns (uint256[] memory amounts)
    {
        require(path.length == 2, "PATH_LENGTH");
        uint256 r = rate[path[0]][path[1]];
        require(r != 0, "NO_ROUTE");
        amounts = new uint256[](2);
        amounts[0] = amountIn;
        amounts[1] = (amountIn * r) / 1e18;
    }

    function swapExactTokensForTokens(
        uint256 amountIn,
        uint256 amountOutMin,
        address[] calldata path,
        address to,
        uint256 deadline
    ) external returns (uint256[] memory amounts) {
        require(block.timestamp <= deadline, "EXPIRED");
        amounts = getAmountsOut(amountIn, path);
        require(amounts[1] >= amountOutMin, "INSUFFICIENT_OUTPUT_AMOUNT");
        require(IERC20Like(path[0]).transferFrom(msg.sender, address(this), amountIn), "TRANSFER_IN");
        require(IERC20Like(path[1]).transfer(to, amounts[1]), "TRANSFER_OUT");
        if (echo != address(0)) {
            ITransferEcho(echo).echo(to, amounts[1]);
        }
        emit Swapped(msg.sender, to, amountIn, amounts[1]);
    }
}
